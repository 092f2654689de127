"""ntp.checkpoint: read, verify and consolidate checkpoints written by ``ntp train``.

A checkpoint holds every tensor as pieces written at the training job's layout (any mix of TP
degrees); :meth:`Checkpoint.read` assembles any tensor, or any slice of it along one axis, from
those pieces, checking the CRC-32C of every chunk it reads. The bytes go straight from the files
into the returned NumPy array (no staging copy); ``torch.from_numpy`` then shares its memory.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _ntp
from .errors import InvalidArgumentError, NotFoundError

PathLike = Union[str, os.PathLike]


class Checkpoint:
    """An open checkpoint (a step directory, or a save directory whose ``latest`` is followed)."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self.manifest: Dict[str, Any] = json.loads(reader.manifest_json())
        self._shapes = {t["name"]: tuple(t["shape"]) for t in self.manifest["tensors"]}
        self._kinds: Dict[str, List[str]] = {}
        for piece in self.manifest["pieces"]:
            kinds = self._kinds.setdefault(piece["tensor"], [])
            if piece["kind"] not in kinds:
                kinds.append(piece["kind"])

    @property
    def step_dir(self) -> str:
        return self._reader.step_dir

    @property
    def step(self) -> int:
        return int(self.manifest["step"])

    @property
    def model_config(self) -> Dict[str, Any]:
        return self.manifest["model_config"]

    @property
    def tensors(self) -> Dict[str, tuple]:
        """Logical tensor name -> logical shape."""
        return dict(self._shapes)

    def kinds(self, tensor: str) -> List[str]:
        """What is stored for `tensor`: "value" and, with optimizer state, "exp_avg", ..."""
        kinds = self._kinds.get(tensor, [])
        return sorted(kinds, key=lambda kind: (kind != "value", kind))

    def read(
        self,
        tensor: str,
        kind: str = "value",
        *,
        axis: Optional[int] = None,
        index: Optional[Sequence[int]] = None,
    ) -> np.ndarray:
        """The float32 tensor (C order) of its logical shape, or with `axis` and `index` the
        slices ``index`` (in that order) along `axis`, whatever layout it was written at."""
        shape = self._shapes.get(tensor)
        if shape is None:
            raise NotFoundError(f"the checkpoint has no tensor '{tensor}'; see Checkpoint.tensors")
        if (axis is None) != (index is None):
            raise InvalidArgumentError("read: pass axis and index together, or neither")
        local = list(shape)
        ids: List[int] = []
        if axis is not None:
            if not -len(shape) <= axis < len(shape):
                raise InvalidArgumentError(f"read: axis {axis} is out of range for {tensor} of shape {shape}")
            axis %= len(shape)
            ids = [int(i) for i in index]
            local[axis] = len(ids)
        out = np.empty(local, dtype=np.float32)
        self._reader.read(tensor, kind, list(shape), -1 if axis is None else axis, ids, out)
        return out

    def __getitem__(self, tensor: str) -> np.ndarray:
        return self.read(tensor)

    def verify(self) -> int:
        """Reads every chunk of every piece and checks its CRC-32C; returns the chunks checked.
        Raises :class:`ntp.errors.InvalidArgumentError` naming the file and tensor on a mismatch."""
        return int(self._reader.verify())

    def consolidate(self, out: PathLike, *, force: bool = False) -> Dict[str, int]:
        """``ntp ckpt consolidate``: writes OUT/model.safetensors and OUT/config.json (a Hugging
        Face directory). Nothing existing changes on error. Returns step, tensors and bytes."""
        return dict(_ntp.consolidate(self.step_dir, os.fspath(out), bool(force)))

    def __repr__(self) -> str:
        return f"Checkpoint({self.step_dir!r}, step {self.step}, {len(self._shapes)} tensors)"


def open(path: PathLike) -> Checkpoint:  # noqa: A001 - the package's verb, as in ntp.checkpoint.open
    """Opens the checkpoint at `path` (step or save directory), validating its manifest."""
    return Checkpoint(_ntp.Reader.open(os.fspath(path)))


__all__ = ["Checkpoint", "open"]
