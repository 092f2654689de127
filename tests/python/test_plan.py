"""ntp.plan against `ntp plan --json` for the same request."""

import numpy as np
import pytest

import ntp
from conftest import cli_error, cli_json

# The model ntp.plan defaults to: the demo's (scripts/demo.sh).
DEMO_MODEL = ["--heads", "128", "--hidden", "20480", "--ffn", "81920", "--ffn-block", "256",
              "--vocab", "128256", "--layers", "100"]


def test_the_issue_example_prints_the_cli_sync_degree():
    plan = ntp.plan(domains=16, tp=72, failed=[(3, 5)])
    cli = cli_json("plan", "--domains", "16", "--tp", "72", "--failed", "3:5", *DEMO_MODEL, "--json")
    assert plan.sync_degree == cli["sync"]["sync_degree"] == 71
    assert plan.json == cli  # the whole document, field for field


def test_the_demo_plan_with_a_repair_is_the_cli_document():
    failed = [(3, 5), (3, 40), (7, 0), (7, 1), (7, 2), (11, 71), (12, 17)]
    plan = ntp.plan(16, 72, failed=failed, repair=[(3, 5)], min_tp=64)
    cli = cli_json("plan", "--domains", "16", "--tp", "72", "--min-tp", "64", "--failed",
                   "3:5,3:40,7:0,7:1,7:2,11:71,12:17", "--repair", "3:5", *DEMO_MODEL, "--json")
    assert plan.json == cli
    assert list(plan.layout.degrees) == [72, 72, 72, 70, 72, 72, 72, 69, 72, 72, 72, 71, 71, 72, 72, 72]
    assert plan.repaired is not None and plan.repaired.degrees[3] == 71
    assert plan.on_repair is not None
    assert len(plan.on_repair.transfers) == len(cli["reshard"]["repair"]["transfers"])


def test_every_replica_owns_each_unit_exactly_once():
    plan = ntp.plan(domains=4, tp=8, failed=[(1, 2), (2, 0), (2, 7)], heads=32, ffn=4096, ffn_block=64,
                    vocab=1000, hidden=4096, layers=4)
    for space in plan.spaces:
        for replica in plan.replicas:
            ids = np.sort(np.concatenate(replica.units[space["name"]]))
            assert np.array_equal(ids, np.arange(space["units"]))
            owners = replica.owners(space["name"], space["units"])
            assert owners.min() == 0 and owners.max() == replica.degree - 1
    # fold: every replica syncs at the smallest degree
    assert plan.sync_degree == int(plan.layout.degrees.min()) == 6


def test_reshard_table_columns_sum_to_the_plan_totals():
    plan = ntp.plan(domains=4, tp=8, failed=[(1, 2)], heads=32, ffn=4096, ffn_block=64, hidden=4096)
    table = plan.on_failure.table()
    moved = plan.on_failure.intra_domain_bytes + plan.on_failure.dp_peer_bytes
    assert int(table["bytes"].sum()) == moved
    assert len({len(column) for column in table.values()}) == 1


def test_errors_carry_the_cli_message():
    with pytest.raises(ntp.InvalidArgumentError) as bad_slot:
        ntp.plan(domains=16, tp=72, failed=[(3, 99)])
    assert str(bad_slot.value) == cli_error("plan", "--domains", "16", "--tp", "72", "--failed", "3:99",
                                            *DEMO_MODEL)
    with pytest.raises(ntp.InvalidArgumentError) as bad_strategy:
        ntp.plan(domains=2, tp=4, strategy="ring")
    assert str(bad_strategy.value) == cli_error("plan", "--domains", "2", "--tp", "4", "--strategy", "ring",
                                                *DEMO_MODEL)
    assert isinstance(bad_strategy.value, ValueError)  # what Python code catches for bad input
    with pytest.raises(TypeError, match="is not a .domain, slot. pair"):
        ntp.plan(domains=2, tp=4, failed=[(1,)])


def test_a_moe_plan_deals_whole_experts_as_the_cli_does():
    plan = ntp.plan(domains=4, tp=8, failed=[(1, 3)], heads=32, hidden=4096, ffn=2048, ffn_block=1,
                    vocab=32000, layers=1, kv_heads=8, experts=64)
    cli = cli_json("plan", "--domains", "4", "--tp", "8", "--failed", "1:3", "--heads", "32",
                   "--hidden", "4096", "--ffn", "2048", "--ffn-block", "1", "--vocab", "32000",
                   "--layers", "1", "--kv-heads", "8", "--experts", "64", "--json")
    assert plan.json == cli
    for replica in plan.replicas:
        experts = replica.units["experts"]
        assert np.array_equal(np.sort(np.concatenate(experts)), np.arange(64))
        assert max(len(held) for held in experts) == (10 if replica.degree == 7 else 8)


def test_expert_loads_place_a_reduced_replica_by_load_as_the_cli_does():
    # Expert 0 carries 40 of 130 routed tokens: the reduced replica (TP 7) gives it a rank of its
    # own, and no placement beats a busiest rank of 40, so the imbalance is 40 / (130 / 7).
    loads = [40, 30, 20, 10, 5, 5, 5, 5, 5, 5]
    plan = ntp.plan(domains=3, tp=8, failed=[(1, 3)], heads=16, hidden=2048, ffn=64, ffn_block=1,
                    vocab=64, layers=1, kv_heads=4, experts=10, expert_loads=loads)
    cli = cli_json("plan", "--domains", "3", "--tp", "8", "--failed", "1:3", "--heads", "16",
                   "--hidden", "2048", "--ffn", "64", "--ffn-block", "1", "--vocab", "64",
                   "--layers", "1", "--kv-heads", "4", "--experts", "10",
                   "--expert-loads", ",".join(str(x) for x in loads), "--json")
    assert plan.json == cli
    reduced = plan.json["replicas"][1]
    assert reduced["load_imbalance"]["experts"] == pytest.approx(40 / (130 / 7), rel=1e-15)
    with pytest.raises(ntp.InvalidArgumentError, match="--expert-loads has 2 values"):
        ntp.plan(domains=3, tp=8, heads=16, hidden=2048, ffn=64, ffn_block=1, vocab=64, layers=1, kv_heads=4,
                 experts=10, expert_loads=[1, 2])
