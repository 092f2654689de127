"""ntp.checkpoint on a checkpoint written by a TP {4,3} job, against `ntp ckpt consolidate`."""

import json
import shutil
import struct

import numpy as np
import pytest

import ntp
from conftest import cli_error, run_cli


def read_safetensors(path):
    """name -> float32 array of a safetensors file, parsed here (no safetensors package)."""
    blob = open(path, "rb").read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + header_len])
    data = blob[8 + header_len :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
    return out


def test_every_tensor_equals_the_consolidated_export_bit_for_bit(mixed_checkpoint, tmp_path):
    ckpt = ntp.checkpoint.open(mixed_checkpoint)
    layout = ckpt.manifest["layout"]
    assert (layout["domains"], layout["tp"], layout["failed"]) == (2, 4, ["1:3"])  # TP {4,3}
    done = run_cli("ckpt", "consolidate", str(mixed_checkpoint), "--out", str(tmp_path / "hf"))
    assert done.returncode == 0, done.stderr
    exported = read_safetensors(tmp_path / "hf" / "model.safetensors")
    assert exported, "the export holds no tensor"
    for name, expected in exported.items():
        got = ckpt.read(name)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        assert got.shape == expected.shape, name
        assert got.tobytes() == expected.tobytes(), name  # bit for bit


def test_consolidate_from_python_writes_the_cli_files(mixed_checkpoint, tmp_path):
    ckpt = ntp.checkpoint.open(mixed_checkpoint)
    summary = ckpt.consolidate(tmp_path / "py")
    assert run_cli("ckpt", "consolidate", str(mixed_checkpoint), "--out", str(tmp_path / "cli")).returncode == 0
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert summary["step"] == ckpt.step == 6
    with pytest.raises(ntp.InvalidArgumentError):  # a non-empty OUT without force
        ckpt.consolidate(tmp_path / "py")


def test_slices_and_optimizer_state(mixed_checkpoint):
    ckpt = ntp.checkpoint.open(mixed_checkpoint)
    name = next(n for n, shape in ckpt.tensors.items() if len(shape) == 2 and shape[0] >= 4)
    full = ckpt.read(name)
    rows = [3, 0, 2]
    assert np.array_equal(ckpt.read(name, axis=0, index=rows), full[rows])
    assert np.array_equal(ckpt.read(name, axis=-1, index=[1]), full[:, [1]])
    assert ckpt.kinds(name) == ["value", "exp_avg", "exp_avg_sq"]
    assert ckpt.read(name, "exp_avg_sq").min() >= 0  # a second moment
    with pytest.raises(ntp.NotFoundError):
        ckpt.read("no.such.tensor")


def test_verify_checks_every_chunk_once_and_names_a_corrupt_file(mixed_checkpoint, tmp_path):
    ckpt = ntp.checkpoint.open(mixed_checkpoint)
    chunks = sum(len(p["crc32c"]) for p in ckpt.manifest["pieces"])
    assert ckpt.verify() == chunks
    copy = tmp_path / "copy"
    shutil.copytree(ckpt.step_dir, copy)
    victim = sorted(copy.glob("*.safetensors"))[0]
    blob = bytearray(victim.read_bytes())
    blob[-1] ^= 0x01  # the last byte of the last tensor's data
    victim.write_bytes(bytes(blob))
    with pytest.raises(ntp.InvalidArgumentError) as corrupt:
        ntp.checkpoint.open(copy).verify()
    assert str(corrupt.value) == cli_error("ckpt", "verify", str(copy))
    assert victim.name in str(corrupt.value)


def test_open_errors_carry_the_cli_message(tmp_path):
    with pytest.raises(ntp.Error) as missing:
        ntp.checkpoint.open(tmp_path)
    assert str(missing.value) == cli_error("ckpt", "verify", str(tmp_path))
