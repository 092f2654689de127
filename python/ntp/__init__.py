"""ntp: Nonuniform Tensor Parallelism from Python.

- :func:`ntp.plan` lays out a cluster whose replicas run at mixed TP degrees after failures (the
  data ``ntp plan --json`` prints, with unit ids as NumPy arrays);
- :func:`ntp.sim` runs the cluster goodput simulator and returns one record per trial and policy,
  ready for ``pandas.DataFrame``;
- :func:`ntp.checkpoint.open` reads any tensor of a checkpoint written at any layout as a NumPy
  array, verifies it, and consolidates it to a Hugging Face directory.

Errors are :mod:`ntp.errors` exceptions with the CLI's one-line messages. See docs/python.md.
"""

from . import checkpoint, errors
from ._plan import Fold, DpGroup, Layout, Plan, ReplicaLayout, ReshardPlan, SyncPlan, Transfer, plan
from ._sim import bundled_configs, sim
from .errors import AlreadyExistsError, Error, InvalidArgumentError, NotFoundError

__version__ = "0.1.0"

__all__ = [
    "plan",
    "sim",
    "bundled_configs",
    "checkpoint",
    "errors",
    "Plan",
    "Layout",
    "ReplicaLayout",
    "SyncPlan",
    "Fold",
    "DpGroup",
    "ReshardPlan",
    "Transfer",
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "AlreadyExistsError",
]
