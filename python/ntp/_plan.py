"""ntp.plan: the cluster layout, sync plan and reshard plans of ``ntp plan``, as Python objects."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _ntp

Slot = Tuple[int, int]  # (domain, local slot)
SlotList = Union[str, Sequence[Slot]]


def _ranges(pairs: Sequence[Sequence[int]]) -> np.ndarray:
    """A range list [[begin, end), ...] as an int64 array of shape (n, 2)."""
    return np.asarray(pairs, dtype=np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class ReplicaLayout:
    """One replica (one scale-up domain) at its TP degree."""

    domain: int
    degree: int
    slots: np.ndarray  # int64 [degree]: slots[rank] is the local slot that runs TP rank `rank`
    units: Dict[str, List[np.ndarray]]  # units[space][rank]: sorted int64 unit ids of that rank
    imbalance: Dict[str, float]  # max units per rank / (units / degree), per space

    def owners(self, space: str, units: int) -> np.ndarray:
        """int64 [units]: the TP rank that owns each unit of `space` (-1 for none)."""
        out = np.full(units, -1, dtype=np.int64)
        for rank, ids in enumerate(self.units[space]):
            out[ids] = rank
        return out


@dataclass(frozen=True)
class Fold:
    """Gradients of `units` move from one rank of a replica to another before the DP reduction."""

    space: str
    domain: int
    from_rank: int
    to_rank: int
    units: np.ndarray  # int64 (n, 2) half-open ranges
    bytes: int


@dataclass(frozen=True)
class DpGroup:
    """One gradient all-reduce across replicas: a partition of a space, one rank per replica."""

    space: str
    index: int
    units: np.ndarray  # int64 (n, 2) half-open ranges
    bytes_per_member: int
    members: np.ndarray  # int64 (replicas, 2): [domain, rank]


@dataclass(frozen=True)
class SyncPlan:
    strategy: str  # "fold" or "native"
    sync_degree: int
    folds: List[Fold]
    dp_groups: List[DpGroup]
    # rank_costs[domain]: int64 (degree, 3) of [fold_out_bytes, fold_in_bytes, dp_bytes] per rank
    rank_costs: List[np.ndarray]


@dataclass(frozen=True)
class Transfer:
    """Units of one space move from a source slot to a destination slot."""

    space: str
    source: Slot
    destination: Slot
    units: np.ndarray  # int64 (n, 2) half-open ranges
    bytes: int


@dataclass(frozen=True)
class ReshardPlan:
    transfers: List[Transfer]
    intra_domain_bytes: int
    dp_peer_bytes: int
    kept_bytes: int
    max_bytes_into_slot: int

    def table(self) -> Dict[str, np.ndarray]:
        """The transfers as columns (space, source/destination domain and slot, units, bytes),
        which ``pandas.DataFrame`` takes as they are."""
        t = self.transfers
        return {
            "space": np.array([x.space for x in t], dtype=object),
            "source_domain": np.array([x.source[0] for x in t], dtype=np.int64),
            "source_slot": np.array([x.source[1] for x in t], dtype=np.int64),
            "destination_domain": np.array([x.destination[0] for x in t], dtype=np.int64),
            "destination_slot": np.array([x.destination[1] for x in t], dtype=np.int64),
            "units": np.array([int((x.units[:, 1] - x.units[:, 0]).sum()) for x in t], dtype=np.int64),
            "bytes": np.array([x.bytes for x in t], dtype=np.int64),
        }


@dataclass(frozen=True)
class Layout:
    """Every replica's layout and the gradient sync plan between them."""

    replicas: List[ReplicaLayout]
    sync: SyncPlan

    @property
    def degrees(self) -> np.ndarray:
        return np.array([r.degree for r in self.replicas], dtype=np.int64)


@dataclass(frozen=True)
class Plan:
    """What ``ntp plan --json`` prints for the same request (docs/plan-json.md), as objects.

    ``json`` is that document itself; the other fields are views of it with NumPy arrays.
    """

    json: Dict[str, Any]
    layout: Layout  # after the failures
    on_failure: ReshardPlan  # healthy -> after the failures
    repaired: Optional[Layout]  # after `repair`, when given
    on_repair: Optional[ReshardPlan]

    @property
    def sync_degree(self) -> int:
        return self.layout.sync.sync_degree

    @property
    def replicas(self) -> List[ReplicaLayout]:
        return self.layout.replicas

    @property
    def spaces(self) -> List[Dict[str, Any]]:
        return self.json["spaces"]


def _replica(j: Dict[str, Any]) -> ReplicaLayout:
    return ReplicaLayout(
        domain=j["domain"],
        degree=j["degree"],
        slots=np.asarray(j["slots"], dtype=np.int64),
        units={s: [np.asarray(r, dtype=np.int64) for r in per_rank] for s, per_rank in j["units"].items()},
        imbalance=dict(j["imbalance"]),
    )


def _sync(j: Dict[str, Any]) -> SyncPlan:
    return SyncPlan(
        strategy=j["strategy"],
        sync_degree=j["sync_degree"],
        folds=[Fold(f["space"], f["domain"], f["from_rank"], f["to_rank"], _ranges(f["units"]), f["bytes"])
               for f in j["folds"]],
        dp_groups=[DpGroup(g["space"], g["index"], _ranges(g["units"]), g["bytes_per_member"],
                           np.asarray(g["members"], dtype=np.int64).reshape(-1, 2))
                   for g in j["dp_groups"]],
        rank_costs=[np.array([[c["fold_out_bytes"], c["fold_in_bytes"], c["dp_bytes"]] for c in replica],
                             dtype=np.int64).reshape(-1, 3)
                    for replica in j["rank_costs"]],
    )


def _reshard(j: Dict[str, Any]) -> ReshardPlan:
    return ReshardPlan(
        transfers=[Transfer(t["space"], tuple(t["source"]), tuple(t["destination"]), _ranges(t["units"]),
                            t["bytes"]) for t in j["transfers"]],
        intra_domain_bytes=j["intra_domain_bytes"],
        dp_peer_bytes=j["dp_peer_bytes"],
        kept_bytes=j["kept_bytes"],
        max_bytes_into_slot=j["max_bytes_into_slot"],
    )


def _slot_list(value: SlotList, name: str) -> str:
    """(domain, slot) pairs -> the CLI's DOMAIN:SLOT,... text (a string passes unchanged)."""
    if isinstance(value, str):
        return value
    parts = []
    for item in value:
        try:
            domain, slot = item
        except (TypeError, ValueError):
            raise TypeError(f"{name}: {item!r} is not a (domain, slot) pair; pass e.g. [(3, 5)]") from None
        parts.append(f"{int(domain)}:{int(slot)}")
    return ",".join(parts)


def plan(
    domains: int,
    tp: int,
    failed: SlotList = (),
    repair: SlotList = (),
    *,
    min_tp: int = 1,
    heads: int = 128,
    hidden: int = 20480,
    ffn: int = 81920,
    ffn_block: int = 256,
    vocab: int = 128256,
    layers: int = 100,
    grad_bytes: int = 4,
    state_bytes: int = 14,
    strategy: str = "fold",
    kv_heads: int = 0,
    experts: int = 0,
    shared_experts: int = 0,
    expert_loads: Sequence[float] = (),
) -> Plan:
    """Lay out `domains` replicas of full TP degree `tp` with the `failed` slots lost.

    The arguments are ``ntp plan``'s flags (``failed=[(3, 5)]`` is ``--failed 3:5``); the model
    defaults are the demo's (scripts/demo.sh: 128 heads, hidden 20480, FFN 81920 in units of 256,
    vocabulary 128256, 100 layers). ``hidden=0`` means 128 x heads. `repair` lists failed slots
    that come back and adds the repair's layout and reshard plan. ``kv_heads`` (grouped-query
    attention, ``--kv-heads``) and ``experts`` (a Mixtral-style MoE, ``--experts``: whole experts
    are a unit space; ``ffn`` is then one expert's width) add the Llama and MoE spaces.
    ``expert_loads`` (``--expert-loads``: routed tokens per expert) places a reduced replica's
    experts by load, as ``ntp train`` does after a failure; each replica then reports its
    ``load_imbalance`` in ``json``.

    Raises :class:`ntp.errors.InvalidArgumentError` with the CLI's message for a bad request.
    """
    text = _ntp.plan_json(
        domains=int(domains), tp=int(tp), min_tp=int(min_tp), failed=_slot_list(failed, "failed"),
        repair=_slot_list(repair, "repair"), heads=int(heads), ffn=int(ffn), ffn_block=int(ffn_block),
        vocab=int(vocab), hidden=int(hidden), layers=int(layers), grad_bytes=int(grad_bytes),
        state_bytes=int(state_bytes), strategy=str(strategy), kv_heads=int(kv_heads),
        experts=int(experts), shared_experts=int(shared_experts),
        expert_loads=[float(x) for x in expert_loads],
    )
    j = json.loads(text)
    repaired = j["repaired"]
    return Plan(
        json=j,
        layout=Layout([_replica(r) for r in j["replicas"]], _sync(j["sync"])),
        on_failure=_reshard(j["reshard"]["failure"]),
        repaired=Layout([_replica(r) for r in repaired["replicas"]], _sync(repaired["sync"])) if repaired else None,
        on_repair=_reshard(j["reshard"]["repair"]) if j["reshard"]["repair"] else None,
    )
