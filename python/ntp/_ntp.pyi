"""Type stubs of ntp._ntp, the compiled half of the package (use `ntp`, not this module)."""

from typing import Dict, List

import numpy as np

def plan_json(
    domains: int,
    tp: int,
    min_tp: int,
    failed: str,
    repair: str,
    heads: int,
    ffn: int,
    ffn_block: int,
    vocab: int,
    hidden: int,
    layers: int,
    grad_bytes: int,
    state_bytes: int,
    strategy: str,
    kv_heads: int = 0,
    experts: int = 0,
    shared_experts: int = 0,
    expert_loads: List[float] = ...,
) -> str: ...
def sim_records_json(config: str, overrides: List[str]) -> str: ...
def consolidate(dir: str, out: str, force: bool) -> Dict[str, int]: ...

class Reader:
    @staticmethod
    def open(dir: str) -> "Reader": ...
    @property
    def step_dir(self) -> str: ...
    def manifest_json(self) -> str: ...
    def read(
        self,
        tensor: str,
        kind: str,
        logical_shape: List[int],
        axis: int,
        index: List[int],
        out: np.ndarray,
    ) -> None: ...
    def verify(self) -> int: ...
