"""Fixtures of the Python package's tests: the `ntp` CLI they compare against, and a TP {4,3}
checkpoint written by a real `ntp launch ... ntp train` job."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def ntp_binary() -> str:
    path = os.environ.get("NTP_BINARY", str(REPO / "build" / "bin" / "ntp"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"the ntp CLI is not at {path}: build it (scripts/setup.sh) or set NTP_BINARY")
    return path


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([ntp_binary(), *args], capture_output=True, text=True, timeout=timeout)


def cli_json(*args: str):
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cli_error(*args: str) -> str:
    """The message of the CLI's one error line, `ntp CMD: error: MESSAGE`."""
    done = run_cli(*args)
    assert done.returncode != 0, done.stdout
    line = done.stderr.strip().splitlines()[-1]
    assert ": error: " in line, done.stderr
    return line.split(": error: ", 1)[1]


def write_token_file(path: Path, tokens: np.ndarray) -> None:
    """llm.c's .bin format (src/data/token_file.h): 256 int32 header, then uint16 tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


@pytest.fixture(scope="session")
def mixed_checkpoint(tmp_path_factory) -> Path:
    """The save directory of a 2-domain TP-4 job with slot 1:3 failed (replicas at TP {4,3}),
    6 steps of the small GPT-2 test model with AdamW state, checkpointed at the end."""
    root = tmp_path_factory.mktemp("tp43")
    rng = np.random.default_rng(3)
    for name in ("train.bin", "val.bin"):
        write_token_file(root / name, rng.integers(0, 256, 20000))
    save = root / "ckpt"
    cmd = [ntp_binary(), "launch", "--nproc-per-node", "8", "--", ntp_binary(), "train",
           "--layers", "2", "--heads", "8", "--width", "32", "--context", "16", "--ffn-unit", "4",
           "--train-data", str(root / "train.bin"), "--val-data", str(root / "val.bin"), "--quiet",
           "--domains", "2", "--tp", "4", "--failed", "1:3", "--batch", "8", "--micro-batch", "2",
           "--steps", "6", "--warmup", "2", "--no-live-recovery", "--timeout-ms", "20000",
           "--out", str(root / "out"), "--save-dir", str(save)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return save
