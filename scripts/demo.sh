#!/usr/bin/env bash
# The main job: set up, build, and run the ntp demo.
#
#   scripts/demo.sh
#
# Three parts, each a real run of the `ntp` binary:
#  1. ntp plan: a 16-rack NVL72 cluster (TP72 replicas, the NTP paper's 480B model shape) in which
#     four racks have lost GPUs to different degrees (71, 70, 69, 71), then rack 3 is repaired:
#     every replica's degree and balance, the gradient sync plan across replicas of mixed degrees,
#     and the bytes that must move on failure and on repair.
#  2. ntp launch: four workers allreduce every step; rank 1 is SIGKILLed at step 4 and a fresh
#     worker replaces it at step 8. The survivors get kUnavailable, agree on who is left, rebuild
#     their communicator and go on (4 -> 3 -> 4 ranks) without a restart; every sum is checked.
#  3. ntp sim: the NTP paper's 32K-GPU B200 NVL32 setup; throughput loss against the failed-GPU
#     fraction for dropping replicas, spares, checkpoint-restart and NTP with and without power boost.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
ntp=./build/bin/ntp

echo
echo "== 1. ntp plan: 16 x NVL72, failures in 4 racks, then rack 3 repaired"
( set -x
  "$ntp" plan --domains 16 --tp 72 --min-tp 64 \
    --failed 3:5,3:40,7:0,7:1,7:2,11:71,12:17 --repair 3:5 \
    --heads 128 --hidden 20480 --ffn 81920 --ffn-block 256 --vocab 128256 --layers 100 )

echo
echo "== 2. ntp launch: live recovery of collectives (kill rank 1 at step 4, replace it at step 8)"
( set -x
  "$ntp" launch --nproc-per-node 4 --inject kill:rank=1,at=4 --inject repair:rank=1,at=8 \
    -- "$ntp" comm-worker --steps 20 --timeout-ms 700 )

echo
echo "== 3. ntp sim: the NTP paper's setup (32,768 B200 in NVL32, 480B model), loss vs failed GPUs"
( set -x
  "$ntp" sim --config configs/sim/paper-b200-nvl32.toml --set parallel.pp=1 \
    --failed-fraction 0.001,0.002,0.004 )
