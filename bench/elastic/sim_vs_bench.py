#!/usr/bin/env python3
"""The control-plane simulator against real members on this host (issue 35, item 4).

Runs bench/elastic/control_plane_bench --repeats times over the given member counts (each run
covers every count, so slow drifts of the host spread over all of them), takes each phase's
median, fits the simulator's host parameters at the smallest counts only, and prints the
simulator's prediction at every count beside the bench's median and range, with the ratio:

  - cpu_per_op (a member's CPU per store op sent and per reply taken in) from the agreement at
    the smallest count (the agreement runs before any link is set up, so it alone sets it);
  - link_rtt (a message's round trip between two members' threads: a barrier's hop) and
    connect (a member's CPU per link set up) from the formation at the two smallest counts
    (the simulated formation is linear in both; three simulator runs give its coefficients).

The store's service rate and round trip are measured apart (redis-benchmark, docs/perf.md) and
given as flags. Counts past the two smallest are predictions, not fits.

  bench/elastic/sim_vs_bench.py --members 16,32,48,64,96,128 --repeats 5 \
      --store-ops 145000 --rtt-us 63

--save-runs FILE keeps the bench's JSON lines; --bench-runs FILE compares against saved ones
instead of running the bench (a change of the simulator measured against the same runs).

Writes progress to stderr, the table to stdout; exits 1 if a run fails to produce figures for
the fitted counts.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

PHASES = ("abort_all_s", "agree_s", "form_s")
# The agreement's parts, in both tools' JSON under "agree_parts": from the last abort to the last
# member entering the epoch, to the decider's list, to the last member holding it.
AGREE_PARTS = ("announce_s", "decide_s", "take_s")


def run_bench(build, members, repeats, steady_s):
    runs = {n: [] for n in members}
    for r in range(repeats):
        print(f"bench run {r + 1} of {repeats}: members {members}", file=sys.stderr, flush=True)
        out = subprocess.run(
            [os.path.join(build, "bench/elastic/control_plane_bench"), "--members",
             ",".join(map(str, members)), "--steady-s", str(steady_s), "--max-s", "120"],
            capture_output=True, text=True, timeout=900)
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                runs[row["members"]].append(row)
    return runs


def load_runs(path, members):
    runs = {n: [] for n in members}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row["members"] in runs:
                runs[row["members"]].append(row)
    return runs


def save_runs(path, runs):
    with open(path + ".tmp", "w") as f:
        for rows in runs.values():
            for row in rows:
                f.write(json.dumps(row) + "\n")
    os.replace(path + ".tmp", path)


def summary(rows, phase, part=None):
    """Median, min, max and count of rows' `phase` (or of `part` in their "agree_parts")."""
    if part is not None:
        rows = [r["agree_parts"] for r in rows if r.get("agree_parts")]
        phase = part
    values = [r[phase] for r in rows if r.get(phase) is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values), len(values)


def simulate(build, members, store_ops, rtt_us, cores, cpu_us, connect_us, link_rtt_us,
             extra=()):
    out = subprocess.run(
        [os.path.join(build, "bin/control_plane_sim"), *extra, "--gpus", ",".join(map(str, members)),
         "--store-ops", str(store_ops), "--rtt-us", str(rtt_us), "--host-cores", str(cores),
         "--cpu-per-op-us", f"{cpu_us:.3f}", "--connect-us", f"{connect_us:.3f}",
         "--link-rtt-us", f"{link_rtt_us:.3f}"],
        capture_output=True, text=True, timeout=600, check=True)
    return {row["gpus"]: row for row in map(json.loads, out.stdout.splitlines())}


def fit_cpu_per_op(sim, n, target_agree):
    """Bisection: the simulated agreement grows with the CPU per op."""
    low, high = 0.0, 1000.0
    for _ in range(30):
        mid = (low + high) / 2
        if sim([n], mid, 0, 0)[n]["agree_s"] < target_agree:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def fit_formation(sim, sizes, targets, cpu_us):
    """form(n) = base(n) + a(n) * link_rtt + b(n) * connect, solved at the two sizes."""
    base = sim(sizes, cpu_us, 0, 0)
    by_rtt = sim(sizes, cpu_us, 0, 1000)
    by_connect = sim(sizes, cpu_us, 100, 0)
    rows = []
    for n, target in zip(sizes, targets):
        b0 = base[n]["form_s"]
        rows.append(((by_rtt[n]["form_s"] - b0) / 1000, (by_connect[n]["form_s"] - b0) / 100,
                     target - b0))
    (a1, c1, t1), (a2, c2, t2) = rows
    det = a1 * c2 - a2 * c1
    if abs(det) > 1e-12:
        link_rtt = (t1 * c2 - t2 * c1) / det
        connect = (a1 * t2 - a2 * t1) / det
        if link_rtt >= 0 and connect >= 0:
            return link_rtt, connect, "exact"
    # No non-negative exact fit (noisy medians, or counts too close): the best of the two
    # one-parameter least-squares fits, the other parameter at 0.
    rtt_only = max(0.0, (a1 * t1 + a2 * t2) / (a1 * a1 + a2 * a2))
    connect_only = max(0.0, (c1 * t1 + c2 * t2) / (c1 * c1 + c2 * c2))
    miss_rtt = (a1 * rtt_only - t1) ** 2 + (a2 * rtt_only - t2) ** 2
    miss_connect = (c1 * connect_only - t1) ** 2 + (c2 * connect_only - t2) ** 2
    if miss_rtt <= miss_connect:
        return rtt_only, 0.0, "least squares, set-up cost at 0"
    return 0.0, connect_only, "least squares, link round trip at 0"


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--members", default="16,32,48,64,96,128")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steady-s", type=float, default=3.0)
    p.add_argument("--store-ops", type=float, required=True,
                   help="the store's service rate (redis-benchmark -t set,get -c 50)")
    p.add_argument("--rtt-us", type=float, required=True,
                   help="the store's round trip from one client (redis-benchmark -t get -c 1)")
    p.add_argument("--host-cores", type=int, default=os.cpu_count())
    p.add_argument("--woken-reads-free", action="store_true",
                   help="simulate with control_plane_sim --woken-reads-free (the store model "
                        "before 2026-12-05), to compare the two models on the same runs")
    p.add_argument("--save-runs", metavar="FILE", help="write the bench's JSON lines to FILE")
    p.add_argument("--bench-runs", metavar="FILE",
                   help="read the bench's JSON lines from FILE (a --save-runs file) instead of "
                        "running it; --repeats and --steady-s are then not used")
    a = p.parse_args()
    members = sorted(int(m) for m in a.members.split(","))
    if len(members) < 3:
        sys.exit("error: --members needs at least 3 counts: two to fit, one or more to predict")

    if a.bench_runs:
        try:
            runs = load_runs(a.bench_runs, members)
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"error: --bench-runs {a.bench_runs}: {e}; give a file --save-runs wrote")
    else:
        runs = run_bench(a.build, members, a.repeats, a.steady_s)
        if a.save_runs:
            save_runs(a.save_runs, runs)
    med = {n: {ph: summary(runs[n], ph) for ph in PHASES} for n in members}
    fit_sizes = members[:2]
    for n in fit_sizes:
        if med[n]["agree_s"] is None or med[n]["form_s"] is None:
            sys.exit(f"error: no agreement or formation figures at {n} members to fit on")

    extra = ["--woken-reads-free"] if a.woken_reads_free else []

    def sim(sizes, cpu_us, connect_us, link_rtt_us):
        return simulate(a.build, sizes, a.store_ops, a.rtt_us, a.host_cores, cpu_us, connect_us,
                        link_rtt_us, extra)

    cpu_us = fit_cpu_per_op(sim, fit_sizes[0], med[fit_sizes[0]]["agree_s"][0])
    link_rtt, connect, how = fit_formation(sim, fit_sizes,
                                           [med[n]["form_s"][0] for n in fit_sizes], cpu_us)
    predicted = sim(members, cpu_us, connect, link_rtt)

    print(f"# host: {a.host_cores} cores; store {a.store_ops:.0f} ops/s, round trip {a.rtt_us} us")
    print(f"# fitted at {fit_sizes[0]} (agreement) and {fit_sizes} (formation): cpu_per_op "
          f"{cpu_us:.1f} us, link_rtt {link_rtt:.0f} us, connect {connect:.0f} us ({how})")
    if a.bench_runs:
        print(f"# bench: the runs saved in {a.bench_runs}; median [min-max] (runs with figures)")
    else:
        print(f"# bench: {a.repeats} runs of control_plane_bench --members {a.members} "
              f"--steady-s {a.steady_s}; median [min-max] (runs with figures)")
    print(f"# sim: {a.build}/bin/control_plane_sim {' '.join(extra)}{' ' if extra else ''}"
          f"--gpus {a.members} --store-ops "
          f"{a.store_ops:.0f} --rtt-us {a.rtt_us} --host-cores {a.host_cores} --cpu-per-op-us "
          f"{cpu_us:.1f} --connect-us {connect:.0f} --link-rtt-us {link_rtt:.0f}")
    print("| N | phase | bench median [min-max] (runs) | sim | sim/bench |")
    print("|---|---|---|---|---|")
    for n in members:
        for ph in PHASES:
            s = med[n][ph]
            got = predicted[n][ph]
            if s is None:
                print(f"| {n} | {ph} | failed in every run | {got:.4f} | - |")
                continue
            fitted = (ph == "agree_s" and n == fit_sizes[0]) or (ph == "form_s" and n in fit_sizes)
            ratio = "fitted" if fitted else f"{got / s[0]:.2f}"
            print(f"| {n} | {ph} | {s[0]:.4f} [{s[1]:.4f}-{s[2]:.4f}] ({s[3]}) | {got:.4f} | "
                  f"{ratio} |")
    print_agree_parts(members, runs, predicted)


def print_agree_parts(members, runs, predicted):
    """The agreement's three parts side by side: where a miss of agree_s comes from. Runs saved
    before the bench measured them have none; then nothing is printed."""
    if not any(r.get("agree_parts") for n in members for r in runs[n]):
        return
    print()
    print("| N | part of agree_s | bench median [min-max] (runs) | sim | sim/bench |")
    print("|---|---|---|---|---|")
    for n in members:
        sim_parts = predicted[n].get("agree_parts") or {}
        for part in AGREE_PARTS:
            s = summary(runs[n], None, part)
            got = sim_parts.get(part)
            if s is None or got is None:
                print(f"| {n} | {part} | {'-' if s is None else f'{s[0]:.4f}'} | "
                      f"{'-' if got is None else f'{got:.4f}'} | - |")
                continue
            ratio = f"{got / s[0]:.2f}" if s[0] > 0 else "-"
            print(f"| {n} | {part} | {s[0]:.4f} [{s[1]:.4f}-{s[2]:.4f}] ({s[3]}) | {got:.4f} | "
                  f"{ratio} |")


if __name__ == "__main__":
    main()
