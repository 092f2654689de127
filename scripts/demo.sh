#!/usr/bin/env bash
# The main job: set up, build, and run the ntp demo.
#
#   scripts/demo.sh
#
# 1. ntp demo (the main part): a small GPT-2 trains on the fortunes corpus as 3 replicas of TP 4
#    (12 worker processes); a device of replica 1 is SIGKILLed and one of replica 2 hangs, both
#    are repaired later; the job shrinks and grows back live. Then the same seed without failures
#    and with checkpoint-restart, a goodput table and plots, all under out/demo/ (docs/demo.md).
# 2. ntp plan: a 16-rack NVL72 cluster with GPUs lost in four racks, then rack 3 repaired.
# 3. ntp sim: the NTP paper's 32K-GPU B200 NVL32 setup; throughput loss against the failed-GPU
#    fraction for dropping replicas, spares, checkpoint-restart and NTP with and without power boost.
# Extra arguments go to `ntp demo` (e.g. scripts/demo.sh --steps 80 --out /tmp/demo; --model moe
# runs part 1 on a Mixtral-style MoE whose experts a lost device hands to the survivors).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
ntp=./build/bin/ntp

echo
echo "== 1. ntp demo: training while devices fail and return"
"$ntp" demo "$@"

echo
echo "== 2. ntp plan: 16 x NVL72, failures in 4 racks, then rack 3 repaired"
( set -x
  "$ntp" plan --domains 16 --tp 72 --min-tp 64 \
    --failed 3:5,3:40,7:0,7:1,7:2,11:71,12:17 --repair 3:5 \
    --heads 128 --hidden 20480 --ffn 81920 --ffn-block 256 --vocab 128256 --layers 100 )

echo
echo "== 3. ntp sim: the NTP paper's setup (32,768 B200 in NVL32, 480B model), loss vs failed GPUs"
( set -x
  "$ntp" sim --config configs/sim/paper-b200-nvl32.toml --set parallel.pp=1 \
    --failed-fraction 0.001,0.002,0.004 )

echo
echo "== done: the training demo's report and plots are in out/demo/ (report.md, summary.json,"
echo "   loss.png/.svg, degrees.png/.svg); docs/demo.md walks through them"
