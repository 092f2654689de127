"""ntp.sim: the cluster goodput simulator (``ntp sim``), one record per trial and policy."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _ntp

Overrides = Union[Mapping[str, Any], Sequence[str], None]

_CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def bundled_configs() -> List[str]:
    """The names of the simulator configs shipped with the package (configs/sim/*.toml)."""
    if not os.path.isdir(_CONFIG_DIR):
        return []
    return sorted(f[: -len(".toml")] for f in os.listdir(_CONFIG_DIR) if f.endswith(".toml"))


def _toml_value(value: Any) -> str:
    """A Python value as the TOML text ``ntp sim --set KEY=VALUE`` takes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"override value {value!r} is not a bool, number, string or list")


def _override_lines(overrides: Overrides) -> List[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={_toml_value(value)}" for key, value in overrides.items()]
    if isinstance(overrides, str):
        raise TypeError("overrides: pass a dict {'section.key': value} or a list of 'section.key=value'")
    return [str(line) for line in overrides]


def _config_path(config: Union[str, os.PathLike]) -> str:
    path = os.fspath(config)
    if not os.path.exists(path) and os.sep not in path and not path.endswith(".toml"):
        bundled = os.path.join(_CONFIG_DIR, path + ".toml")
        if os.path.exists(bundled):
            return bundled
    return path


def sim(
    config: Union[str, os.PathLike],
    overrides: Overrides = None,
    *,
    trials: Optional[int] = None,
    seed: Optional[int] = None,
) -> List[Dict[str, Any]]:
    """Run the simulator config's Monte Carlo trials; one record per trial and policy.

    `config` is a TOML file, or the name of a bundled config (:func:`bundled_configs`, e.g.
    ``"paper-b200-nvl32"``). `overrides` set config keys as ``ntp sim --set`` does: a dict
    ``{"sim.days": 30, "sim.policies": ["NTP", "DP-DROP"]}`` or a list of ``"section.key=value"``.
    `trials` and `seed` override ``sim.trials`` and ``sim.seed``.

    Each record holds ``trial``, ``policy``, ``throughput_loss``, ``goodput``, ``energy_mwh``,
    ``energy_per_work``, ``paused_hours``, ``down_hours``, ``pauses``, ``restarts``,
    ``spares_needed``, ``fail_slow_loss`` and ``fail_slow_goodput_loss``: the values whose means
    ``ntp sim --json`` prints. ``pandas.DataFrame(ntp.sim(...))`` takes them as they are.

    Raises :class:`ntp.errors.InvalidArgumentError` with the CLI's message for a bad config or
    override.
    """
    lines = _override_lines(overrides)
    if trials is not None:
        lines.append(f"sim.trials={int(trials)}")
    if seed is not None:
        lines.append(f"sim.seed={int(seed)}")
    return json.loads(_ntp.sim_records_json(_config_path(config), lines))
