#!/usr/bin/env python3
"""ntp's CPU training step against PyTorch's, side by side, as a ratio.

  bench/model/compare_torch.py [--build build] [--threads 1] [--pairs 5] [--rounds 4]

For each model (the step benchmark's default, and a wider one: width 768, 12 heads, context 512)
it runs `pairs` times, alternating which goes first: ntp's model_train_step_bench (--sgemm 0:
the step alone) and bench/model/torch_step.py, same model, step and thread count, each reporting
its best of `rounds` steps. PyTorch gets the OpenBLAS core ntp selected (OPENBLAS_CORETYPE, unless
the user set one), so both use the best kernels this OpenBLAS has for the host. Prints every
pair's ratio torch ms / ntp ms, their median and spread, and both processes' peak resident memory.
Without PyTorch (Debian: apt-get install python3-torch) it says so and times ntp alone.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

MODELS = [
    dict(width=512, heads=8, context=256, layers=2, batch=4),
    dict(width=768, heads=12, context=512, layers=2, batch=4),
]
TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives in /usr/lib/python3/dist-packages


def run(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return out


def field(pattern, text):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"compare_torch: no '{pattern}' in output:\n{text}")
    return m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    bench = os.path.join(args.build, "bench", "model", "model_train_step_bench")
    have_torch = subprocess.run([TORCH_PYTHON, "-c", "import torch"],
                                capture_output=True).returncode == 0
    if not have_torch:
        print("note: PyTorch not found (apt-get install python3-torch); timing ntp alone")
    print(f"reproduce: {' '.join(sys.argv)}")
    for model in MODELS:
        flags = []
        for k in ("threads", "rounds"):
            flags += [f"--{k}", str(getattr(args, k))]
        for k, v in model.items():
            flags += [f"--{k}", str(v)]
        ratios, ntp_ms, torch_ms, ntp_mem, torch_mem = [], [], [], [], []
        blas = ""
        for pair in range(args.pairs):
            env = dict(os.environ)
            order = ["ntp", "torch"] if pair % 2 == 0 else ["torch", "ntp"]
            for who in order:
                if who == "ntp":
                    out = run([bench, "--sgemm", "0"] + flags, env)
                    blas = field(r"blas: (.*)", out)
                    ntp_ms.append(float(field(r"training step: ([\d.]+) ms", out)))
                    ntp_mem.append(float(field(r"peak resident memory: ([\d.]+) MiB", out)))
                elif have_torch:
                    tenv = dict(env)
                    core = blas.split()[2] if blas else ""
                    if "OPENBLAS_CORETYPE" not in os.environ and core:
                        tenv["OPENBLAS_CORETYPE"] = core
                    if not blas:  # torch first in this pair: take the core from a quick ntp run
                        out = run([bench, "--sgemm", "0", "--rounds", "1"], env)
                        tenv["OPENBLAS_CORETYPE"] = field(r"blas: (.*)", out).split()[2]
                    out = run([TORCH_PYTHON, os.path.join(here, "torch_step.py")] + flags, tenv)
                    torch_ms.append(float(field(r"torch step: ([\d.]+) ms", out)))
                    torch_mem.append(float(field(r"torch peak resident memory: ([\d.]+) MiB", out)))
            if have_torch:
                ratios.append(torch_ms[-1] / ntp_ms[-1])
        desc = ", ".join(f"{k} {v}" for k, v in model.items())
        print(f"\nmodel: {desc}, {args.threads} thread(s)")
        print(f"ntp blas: {blas}")
        print("ntp ms:   " + " ".join(f"{x:.1f}" for x in ntp_ms))
        if have_torch:
            print("torch ms: " + " ".join(f"{x:.1f}" for x in torch_ms))
            print("ratio torch/ntp per pair: " + " ".join(f"{r:.2f}" for r in ratios))
            print(f"ratio torch/ntp: median {statistics.median(ratios):.2f}, "
                  f"min {min(ratios):.2f}, max {max(ratios):.2f} (goal >= 1.3)")
            print(f"peak resident memory: ntp {max(ntp_mem):.0f} MiB, torch {max(torch_mem):.0f} "
                  "MiB")
        else:
            print(f"peak resident memory: ntp {max(ntp_mem):.0f} MiB")


if __name__ == "__main__":
    main()
