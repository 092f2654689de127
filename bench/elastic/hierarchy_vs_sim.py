#!/usr/bin/env python3
"""The simulator's domain hierarchy against real members on this host (issue 35, item 4, for
the hierarchy).

Runs bench/elastic/hierarchy_bench --repeats times over the given member counts (each count in a
process of its own, every repeat going round every count), and control_plane_sim --hierarchy
with --seeds seeds per count, and prints each phase's median side by side: the abort (fault ->
every survivor's domain watch aborted), the agreement (-> every survivor holding the new full
list), with --form the formation (-> every survivor's groups formed: Gloo over its domain's
store, the leaders relaying the addresses across domains; without it the simulator runs
--no-form), the global store's steady load and its ops from the fault to the agreement.

The simulator's host parameters, a member's CPU per store op and per woken read, are either
given (--cpu-per-op-us and --wake-cpu-us: e.g. what sim_vs_bench.py fitted on the flat
protocol's bench on this host, so that every row is a prediction) or, without them, fitted at
the smallest count on this bench's medians as sim_vs_bench.py fits them (cpu_per_op on the
agreement, wake_cpu on the abort), so that every larger count is a prediction.

  bench/elastic/hierarchy_vs_sim.py --members 16,32,64,128 --tp 8 --repeats 5 \\
      --store-ops 92000 --rtt-us 53 [--cpu-per-op-us 20.2 --wake-cpu-us 58.5]

Writes progress to stderr, the table to stdout; exits 1 if a count has no bench figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from sim_vs_bench import fit_store_cpu, summary

PHASES = ("abort_all_s", "agree_s", "form_s", "steady_store_ops_per_s", "recovery_store_ops")
# The agreement's parts, in both tools' JSON under "hierarchy_agree_parts": from the last abort
# to the last domain list agreed, to the last relay of a full list, to the last member holding
# it.
AGREE_PARTS = ("domain_s", "round_s", "take_s")


def run_bench(a, members):
    runs = {n: [] for n in members}
    for r in range(a.repeats):
        print(f"bench run {r + 1} of {a.repeats}: members {members}", file=sys.stderr, flush=True)
        for n in members:
            out = subprocess.run(
                [os.path.join(a.build, "bench/elastic/hierarchy_bench"), "--members", str(n),
                 "--tp", str(a.tp), "--fault", a.fault, "--steady-s", str(a.steady_s),
                 "--form", "yes" if a.form else "no", "--max-s", "120"],
                capture_output=True, text=True, timeout=600)
            for line in out.stdout.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    runs[row["gpus"]].append(row)
    return runs


def simulate(a, members, params, seeds):
    """Per count, the sim's runs over seeds 1..`seeds` with host `params` (sim_vs_bench's
    names: cpu-per-op and wake-cpu, microseconds)."""
    form = ["--link-rtt-us", str(a.link_rtt_us), "--dial-rtt-us", str(a.dial_rtt_us),
            "--connect-us", str(a.connect_us)] if a.form else ["--no-form"]
    out = subprocess.run(
        [os.path.join(a.build, "bin/control_plane_sim"), "--hierarchy", *form,
         "--gpus", ",".join(map(str, members)), "--tp", str(a.tp), "--fault", a.fault,
         "--seeds", str(seeds), "--store-ops", str(a.store_ops), "--rtt-us", str(a.rtt_us),
         "--host-cores", str(a.host_cores), "--cpu-per-op-us", f"{params['cpu-per-op']:.3f}",
         "--wake-cpu-us", f"{params['wake-cpu']:.3f}"],
        capture_output=True, text=True, timeout=600, check=True)
    runs = {n: [] for n in members}
    for row in map(json.loads, out.stdout.splitlines()):
        runs[row["gpus"]].append(row)
    return runs


def fit(a, bench, n):
    """cpu_per_op and wake_cpu fitted at `n` on the bench's medians (seed 1: a fitted figure
    varies by well under a percent between seeds)."""
    agree, abort = summary(bench[n], "agree_s"), summary(bench[n], "abort_all_s")
    if agree is None or abort is None:
        sys.exit(f"error: no agreement or abort figures at {n} members to fit on")

    def sim(sizes, params):
        return {m: rows[0] for m, rows in simulate(a, sizes, params, 1).items()}

    return fit_store_cpu(sim, n, agree[0], abort[0], True)


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
    p.add_argument("--cpu-per-op-us", type=float,
                   help="given (e.g. as sim_vs_bench.py fitted it on this host); without it "
                        "and --wake-cpu-us both are fitted at the smallest count")
    p.add_argument("--wake-cpu-us", type=float)
    p.add_argument("--host-cores", type=int, default=os.cpu_count())
    p.add_argument("--form", action="store_true",
                   help="the bench's members form their groups (hierarchy_bench --form yes) and "
                        "the simulator models it (sim/sim_formation.h, as the flat simulator's), "
                        "with --link-rtt-us, --dial-rtt-us and --connect-us")
    p.add_argument("--link-rtt-us", type=float, default=2200.0,
                   help="a barrier message's round trip (default: the flat fit's on AMD EPYC)")
    p.add_argument("--dial-rtt-us", type=float, default=8420.0,
                   help="a dial's round trip (default: the flat fit's on AMD EPYC)")
    p.add_argument("--connect-us", type=float, default=0.0,
                   help="a member's CPU per link set up (default 0, as the flat fit gives it)")
    a = p.parse_args()
    members = sorted(int(m) for m in a.members.split(","))
    given = a.cpu_per_op_us is not None
    if given != (a.wake_cpu_us is not None):
        sys.exit("error: give both --cpu-per-op-us and --wake-cpu-us, or neither (both fitted)")
    bench = run_bench(a, members)
    if given:
        params = {"cpu-per-op": a.cpu_per_op_us, "wake-cpu": a.wake_cpu_us}
    else:
        params = fit(a, bench, members[0])
    sim = simulate(a, members, params, a.seeds)
    how = "given" if given else f"fitted at {members[0]} members"
    print(f"# host: {a.host_cores} cores; store {a.store_ops:.0f} ops/s, round trip {a.rtt_us} us; "
          f"cpu_per_op {params['cpu-per-op']:.1f} us, wake_cpu {params['wake-cpu']:.1f} us ({how})")
    sim_form = (f"--link-rtt-us {a.link_rtt_us:g} --dial-rtt-us {a.dial_rtt_us:g} "
                f"--connect-us {a.connect_us:g}" if a.form else "--no-form")
    print(f"# bench: {a.repeats} runs of hierarchy_bench --members N --tp {a.tp} --fault {a.fault} "
          f"--steady-s {a.steady_s} --form {'yes' if a.form else 'no'}; sim: control_plane_sim "
          f"--hierarchy {sim_form}, seeds 1-{a.seeds}; medians [min-max] (runs)")
    print("| N | figure | bench | sim | sim/bench |")
    print("|---|---|---|---|---|")
    missing = False
    for n in members:
        for ph in PHASES:
            if ph == "form_s" and not a.form:
                continue
            b, s = summary(bench[n], ph), summary(sim[n], ph)
            if b is None:
                missing = True
                print(f"| {n} | {ph} | failed in every run | {s[0]:.4g} | - |")
                continue
            fitted = not given and n == members[0] and ph in ("abort_all_s", "agree_s")
            ratio = "fitted" if fitted else (f"{s[0] / b[0]:.2f}" if b[0] > 0 else "-")
            print(f"| {n} | {ph} | {b[0]:.4g} [{b[1]:.4g}-{b[2]:.4g}] ({b[3]}) | "
                  f"{s[0]:.4g} [{s[1]:.4g}-{s[2]:.4g}] ({s[3]}) | {ratio} |")
    print()
    print("| N | part of agree_s | bench | sim | sim/bench |")
    print("|---|---|---|---|---|")
    for n in members:
        for part in AGREE_PARTS:
            b, s = (summary(runs[n], None, part, "hierarchy_agree_parts") for runs in (bench, sim))
            if b is None or s is None:
                print(f"| {n} | {part} | {'-' if b is None else f'{b[0]:.4g}'} | "
                      f"{'-' if s is None else f'{s[0]:.4g}'} | - |")
                continue
            ratio = f"{s[0] / b[0]:.2f}" if b[0] > 0 else "-"
            print(f"| {n} | {part} | {b[0]:.4g} [{b[1]:.4g}-{b[2]:.4g}] ({b[3]}) | "
                  f"{s[0]:.4g} [{s[1]:.4g}-{s[2]:.4g}] ({s[3]}) | {ratio} |")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
