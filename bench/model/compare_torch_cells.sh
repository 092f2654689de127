#!/bin/bash
# Interleaved, per model and dtype: ntp's step, Debian's torch 1.13 (python3-torch) and PyPI's
# torch; default models, one thread (docs/perf.md). Run from anywhere after building
# model_train_step_bench in build/.
#   PYPI_PYTHON            python of a venv with PyPI torch (required)
#   PYPI_LD_LIBRARY_PATH   where its CUDA wheels put the libraries it links (PyPI torch is a CUDA
#                          build), if any
#   DEBIAN_PYTHON          python with Debian's torch (/usr/bin/python3); its cells are skipped,
#                          saying so, where it cannot import torch
#   BENCH                  ntp's bench binary (build/bench/model/model_train_step_bench)
#   PIN_CORE               a CPU number: every run is pinned to it (taskset), so that both sides
#                          run on the same core; unset: not pinned
#   REPEATS                rounds of the whole table (2)
# Debian's torch runs on OpenBLAS with the core ntp selected on this host (OPENBLAS_CORETYPE, read
# from the bench's "blas:" line), so that both sides get the same sgemm kernels.
cd "$(dirname "$0")/../.."
PYPI_PYTHON=${PYPI_PYTHON:?set PYPI_PYTHON to a python with PyPI torch}; LDP=${PYPI_LD_LIBRARY_PATH:-}
DEBIAN_PYTHON=${DEBIAN_PYTHON:-/usr/bin/python3}
bench=${BENCH:-build/bench/model/model_train_step_bench}
pin=(); [ -n "${PIN_CORE:-}" ] && pin=(taskset -c "$PIN_CORE")
core=$("${pin[@]}" $bench --sgemm 0 --rounds 1 --layers 1 | sed -n 's/^blas: OpenBLAS [0-9.]* \([A-Za-z0-9]*\).*/\1/p')
echo "OpenBLAS core for Debian's torch: ${core:-default}; pinned: ${PIN_CORE:-no}"
debian=yes; "$DEBIAN_PYTHON" -c 'import torch' 2>/dev/null || { debian=; echo "debian: skipped ($DEBIAN_PYTHON has no torch)"; }
for rep in $(seq 1 "${REPEATS:-2}"); do
 for m in gpt2 llama; do for d in fp32 bf16; do
  echo "== rep $rep $m $d load $(cut -d' ' -f1-3 /proc/loadavg)"
  "${pin[@]}" $bench --sgemm 0 --rounds 3 --model $m --dtype $d | grep -E "training step"
  r=3; [ $d = bf16 ] && ! grep -q avx512_bf16 /proc/cpuinfo && r=1  # 20 s a step without it
  [ -n "$debian" ] && OPENBLAS_CORETYPE=$core timeout 300 "${pin[@]}" "$DEBIAN_PYTHON" bench/model/torch_step.py --rounds $r --model $m --dtype $d | grep -E "torch step" | sed 's/^/debian /'
  OMP_NUM_THREADS=1 LD_LIBRARY_PATH=$LDP timeout 300 "${pin[@]}" "$PYPI_PYTHON" bench/model/torch_step.py --rounds 3 --model $m --dtype $d | grep -E "torch step|attention" | sed 's/^/pypi /'
 done; done
done
echo END
