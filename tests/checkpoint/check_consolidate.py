#!/usr/bin/env python3
"""Loads `ntp ckpt consolidate` output with the Hugging Face `safetensors` package and checks
every tensor name, shape and value (bit for bit) against the reference ntp wrote, plus the
GPT2LMHeadModel config.json fields.

  check_consolidate.py --ntp NTP --fixture CKPT_FIXTURE --work DIR

Needs the PyPI packages `safetensors` and `numpy`. When they are missing the test is skipped
(exit 77) unless CI=true, where it fails: CI must run it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from python_deps import missing_numpy_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ntp", required=True)
    parser.add_argument("--fixture", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()

    missing = missing_numpy_safetensors()
    if missing is not None:
        return missing
    import numpy as np
    from safetensors.numpy import load_file

    shutil.rmtree(args.work, ignore_errors=True)
    save_dir = os.path.join(args.work, "ckpt")
    ref_dir = os.path.join(args.work, "ref")
    out_dir = os.path.join(args.work, "hf")
    subprocess.run([args.fixture, save_dir, ref_dir], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([args.ntp, "ckpt", "consolidate", save_dir, "--out", out_dir], check=True)

    tensors = load_file(os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(ref_dir, "reference.json")) as f:
        reference = json.load(f)
    flat = np.fromfile(os.path.join(ref_dir, "reference.bin"), dtype="<f4")

    failures = []
    expected_names = {r["name"] for r in reference}
    if set(tensors) != expected_names:
        failures.append(f"names differ: extra {sorted(set(tensors) - expected_names)}, "
                        f"missing {sorted(expected_names - set(tensors))}")
    for r in reference:
        name, shape = r["name"], tuple(r["shape"])
        if name not in tensors:
            continue
        got = tensors[name]
        want = flat[r["offset"]:r["offset"] + int(np.prod(shape))].reshape(shape)
        if got.dtype != np.float32 or got.shape != shape:
            failures.append(f"{name}: {got.dtype} {got.shape}, expected float32 {shape}")
        elif not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            failures.append(f"{name}: values differ")

    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    wte = tensors["transformer.wte.weight"].shape
    expected_config = {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": wte[0],
        "n_embd": wte[1], "n_positions": tensors["transformer.wpe.weight"].shape[0],
        "n_layer": sum(1 for n in tensors if n.endswith(".ln_1.weight")),
        "n_inner": tensors["transformer.h.0.mlp.c_fc.weight"].shape[1],
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
    }
    for key, value in expected_config.items():
        if config.get(key) != value:
            failures.append(f"config.json {key} = {config.get(key)!r}, expected {value!r}")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"ok: {len(tensors)} tensors match the reference bit for bit; config.json is GPT-2's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
