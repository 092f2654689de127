#!/usr/bin/env python3
"""The simulator's domain hierarchy against real members on this host (issue 35, item 4, for
the hierarchy).

Runs bench/elastic/hierarchy_bench --repeats times over the given member counts (each count in a
process of its own, every repeat going round every count), and control_plane_sim --hierarchy
--no-form with --seeds seeds per count, and prints each phase's median side by side: the abort
(fault -> every survivor's domain watch aborted), the agreement (-> every survivor holding the
new full list), the global store's steady load and its ops from the fault to the agreement.

Nothing is fitted here. The simulator's host parameters are those sim_vs_bench.py fitted on the
flat protocol's bench on this host (give them as flags), so every row is a prediction: the
hierarchy's machines, domain stores and leaders' rounds, checked with parameters that were never
set on them.

  bench/elastic/hierarchy_vs_sim.py --members 16,32,64,128 --tp 8 --repeats 5 \\
      --store-ops 92000 --rtt-us 53 --cpu-per-op-us 20.2 --wake-cpu-us 58.5

Writes progress to stderr, the table to stdout; exits 1 if a count has no bench figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from sim_vs_bench import summary

PHASES = ("abort_all_s", "agree_s", "steady_store_ops_per_s", "recovery_store_ops")


def run_bench(a, members):
    runs = {n: [] for n in members}
    for r in range(a.repeats):
        print(f"bench run {r + 1} of {a.repeats}: members {members}", file=sys.stderr, flush=True)
        for n in members:
            out = subprocess.run(
                [os.path.join(a.build, "bench/elastic/hierarchy_bench"), "--members", str(n),
                 "--tp", str(a.tp), "--fault", a.fault, "--steady-s", str(a.steady_s),
                 "--max-s", "120"],
                capture_output=True, text=True, timeout=600)
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    runs[row["gpus"]].append(row)
    return runs


def simulate(a, members):
    """Per count, the sim's runs over seeds 1..--seeds."""
    out = subprocess.run(
        [os.path.join(a.build, "bin/control_plane_sim"), "--hierarchy", "--no-form",
         "--gpus", ",".join(map(str, members)), "--tp", str(a.tp), "--fault", a.fault,
         "--seeds", str(a.seeds), "--store-ops", str(a.store_ops), "--rtt-us", str(a.rtt_us),
         "--host-cores", str(a.host_cores), "--cpu-per-op-us", str(a.cpu_per_op_us),
         "--wake-cpu-us", str(a.wake_cpu_us)],
        capture_output=True, text=True, timeout=600, check=True)
    runs = {n: [] for n in members}
    for row in map(json.loads, out.stdout.splitlines()):
        runs[row["gpus"]].append(row)
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--members", default="16,32,64,128")
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--fault", choices=("kill", "leader-kill"), default="kill")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seeds", type=int, default=5, help="simulated seeds per count")
    p.add_argument("--steady-s", type=float, default=2.0)
    p.add_argument("--store-ops", type=float, required=True,
                   help="the store's service rate (redis-benchmark -t set,get -c 50)")
    p.add_argument("--rtt-us", type=float, required=True,
                   help="the store's round trip from one client (redis-benchmark -t get -c 1)")
    p.add_argument("--cpu-per-op-us", type=float, required=True,
                   help="as sim_vs_bench.py fitted it on this host")
    p.add_argument("--wake-cpu-us", type=float, required=True,
                   help="as sim_vs_bench.py fitted it on this host")
    p.add_argument("--host-cores", type=int, default=os.cpu_count())
    a = p.parse_args()
    members = sorted(int(m) for m in a.members.split(","))
    bench = run_bench(a, members)
    sim = simulate(a, members)
    print(f"# host: {a.host_cores} cores; store {a.store_ops:.0f} ops/s, round trip {a.rtt_us} us; "
          f"cpu_per_op {a.cpu_per_op_us} us, wake_cpu {a.wake_cpu_us} us (the flat fit's)")
    print(f"# bench: {a.repeats} runs of hierarchy_bench --members N --tp {a.tp} --fault {a.fault} "
          f"--steady-s {a.steady_s}; sim: control_plane_sim --hierarchy --no-form, seeds 1-{a.seeds}"
          "; medians [min-max] (runs)")
    print("| N | figure | bench | sim | sim/bench |")
    print("|---|---|---|---|---|")
    missing = False
    for n in members:
        for ph in PHASES:
            b, s = summary(bench[n], ph), summary(sim[n], ph)
            if b is None:
                missing = True
                print(f"| {n} | {ph} | failed in every run | {s[0]:.4g} | - |")
                continue
            ratio = f"{s[0] / b[0]:.2f}" if b[0] > 0 else "-"
            print(f"| {n} | {ph} | {b[0]:.4g} [{b[1]:.4g}-{b[2]:.4g}] ({b[3]}) | "
                  f"{s[0]:.4g} [{s[1]:.4g}-{s[2]:.4g}] ({s[3]}) | {ratio} |")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
