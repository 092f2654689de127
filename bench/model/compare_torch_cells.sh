#!/bin/bash
# Interleaved: ntp, Debian torch 1.13, PyPI torch 2.15; default models, one thread.
# PYPI_PYTHON: python of a venv with PyPI torch; PYPI_LD_LIBRARY_PATH: where its CUDA wheels put
# the libraries it links (PyPI torch is a CUDA build). Run from the repository root after building
# model_train_step_bench in build/.
cd "$(dirname "$0")/../.."
PYPI_PYTHON=${PYPI_PYTHON:?set PYPI_PYTHON to a python with PyPI torch}; LDP=${PYPI_LD_LIBRARY_PATH:-}
for rep in 1 2; do
 for m in gpt2 llama; do for d in fp32 bf16; do
  echo "== rep $rep $m $d load $(cut -d' ' -f1-3 /proc/loadavg)"
  build/bench/model/model_train_step_bench --sgemm 0 --rounds 3 --model $m --dtype $d | grep -E "training step"
  r=3; [ $d = bf16 ] && r=1
  OPENBLAS_CORETYPE=Zen timeout 200 /usr/bin/python3 bench/model/torch_step.py --rounds $r --model $m --dtype $d | grep -E "torch step" | sed 's/^/debian /'
  OMP_NUM_THREADS=1 LD_LIBRARY_PATH=$LDP timeout 200 "$PYPI_PYTHON" bench/model/torch_step.py --rounds 3 --model $m --dtype $d | grep -E "torch step|attention" | sed 's/^/pypi /'
 done; done
done
echo END
