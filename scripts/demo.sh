#!/usr/bin/env bash
# The main job: set up, build, and run the ntp demo.
#
#   scripts/demo.sh
#
# Today the demo plans a 16-rack NVL72 cluster (TP72 replicas, the NTP paper's 480B model shape) in which four
# racks have lost GPUs to different degrees, then repairs one of them: it prints every replica's
# degree and balance, the gradient sync plan across replicas of mixed degrees, and the bytes that
# must move on failure and on repair.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build

echo
echo "== ntp plan: 16 x NVL72, failures in 4 racks (degrees 71, 70, 69, 71), then rack 3 repaired"
set -x
./build/bin/ntp plan --domains 16 --tp 72 --min-tp 64 \
  --failed 3:5,3:40,7:0,7:1,7:2,11:71,12:17 --repair 3:5 \
  --heads 128 --hidden 20480 --ffn 81920 --ffn-block 256 --vocab 128256 --layers 100
