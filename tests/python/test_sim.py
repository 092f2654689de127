"""ntp.sim against `ntp sim --json` for the same config and overrides."""

import math
from collections import defaultdict

import pytest

import ntp
from conftest import REPO, cli_error, cli_json

CONFIG = str(REPO / "configs" / "sim" / "gb200-nvl72.toml")
FIELDS = ["throughput_loss", "goodput", "energy_mwh", "energy_per_work", "paused_hours", "down_hours",
          "pauses", "restarts", "spares_needed"]


def cli_policies(*args):
    results = cli_json("sim", "--config", CONFIG, "--json", *args)["results"]
    assert len(results) == 1
    return {p["name"]: p for p in results[0]["policies"]}


def test_record_means_are_the_cli_means():
    records = ntp.sim(CONFIG, {"sim.days": 10}, trials=4, seed=7)
    cli = cli_policies("--days", "10", "--trials", "4", "--seed", "7")
    assert len(records) == 4 * len(cli)  # one per trial and policy
    by_policy = defaultdict(list)
    for r in records:
        by_policy[r["policy"]].append(r)
    assert set(by_policy) == set(cli)
    for name, rows in by_policy.items():
        assert [r["trial"] for r in rows] == [0, 1, 2, 3]
        for field in FIELDS:
            mean = sum(r[field] for r in rows) / len(rows)
            # The CLI's mean is a running (Welford) mean of the same four doubles: it differs
            # from the plain sum's by a few ulps of the values, never more.
            assert math.isclose(mean, cli[name][field]["mean"], rel_tol=1e-13, abs_tol=1e-13), (name, field)
            assert max(r[field] for r in rows) == cli[name][field]["max"]


def test_records_are_flat_rows_a_data_frame_takes():
    records = ntp.sim("gb200-nvl72", ["sim.days=5", "sim.trials=2"])  # a bundled config by name
    keys = list(records[0])
    assert keys[:2] == ["trial", "policy"]
    assert all(list(r) == keys for r in records)
    assert all(isinstance(v, (int, float, str)) for r in records for v in r.values())


def test_dict_and_list_overrides_agree():
    as_dict = ntp.sim(CONFIG, {"sim.days": 5, "sim.trials": 2, "sim.policies": ["NTP", "DP-DROP"]})
    as_list = ntp.sim(CONFIG, ["sim.days=5", "sim.trials=2", 'sim.policies=["NTP", "DP-DROP"]'])
    assert as_dict == as_list
    assert [r["policy"] for r in as_dict] == ["NTP", "DP-DROP", "NTP", "DP-DROP"]


def test_errors_carry_the_cli_message():
    with pytest.raises(ntp.InvalidArgumentError) as bad_key:
        ntp.sim(CONFIG, ["nonsense=1"])
    assert str(bad_key.value) == cli_error("sim", "--config", CONFIG, "--set", "nonsense=1")
    with pytest.raises(ntp.InvalidArgumentError) as missing:
        ntp.sim("/nonexistent/config.toml")
    assert str(missing.value) == cli_error("sim", "--config", "/nonexistent/config.toml")
    with pytest.raises(TypeError):
        ntp.sim(CONFIG, "sim.days=5")  # a bare string is not a list of overrides
