#!/usr/bin/env python3
"""The control-plane simulator against real members on this host (issue 35, item 4).

Runs bench/elastic/control_plane_bench --repeats times over the given member counts (each count
in a process of its own; each repeat covers every count, so slow drifts of the host spread over
all of them), takes each phase's
median, fits the simulator's host parameters at the smallest count only, and prints the
simulator's prediction at every count beside the bench's median and range, with the ratio,
then each phase's parts (agreement, formation) the same way:

  - cpu_per_op (a member's CPU per store op sent and per reply taken in) from the agreement;
  - wake_cpu (a member's CPU, past cpu_per_op, for a reply that wakes a thread blocked on a
    stream read or a link: its thread woken, the message parsed and acted on) from the abort
    (an exit notice wakes every member's blocked read at once). The agreement's waiters take
    the decider's list the same way, so the two are fitted together, in turn until they settle;
  - link_rtt (a barrier message's round trip between two members) from the formation's
    barriers part, and dial_rtt (a dial's round trip, from the connect to the link up at both
    ends) from its links part: the longest chain of dials one member makes, one after another.
  - connect (a member's CPU per link end) is given, --connect-us, default 0.

The store's service rate and round trip are measured apart (redis-benchmark, docs/perf.md) and
given as flags. Every count past the smallest is a prediction, not a fit.

  bench/elastic/sim_vs_bench.py --members 16,32,48,64,96,128 --repeats 5 \
      --store-ops 92000 --rtt-us 53

--save-runs FILE keeps the bench's JSON lines; --bench-runs FILE compares against saved ones
instead of running the bench (a change of the simulator measured against the same runs).

Writes progress to stderr, the table to stdout; exits 1 if the runs have no figures (or, saved
before 2026-12-05, no formation parts) at the fitted count.
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
# The formation's, under "form_parts": from the last member holding the list to the last with
# every link up (addresses exchanged, links set up), to the last past its groups' barriers, to
# the last done.
FORM_PARTS = ("link_s", "barrier_s", "done_s")


def run_bench(build, members, repeats, steady_s):
    """Each count in a process of its own (a job starts fresh): in one process, counts after
    the first met a slowed socket set-up (docs/perf.md, the formation's 1 s mode at 128). The
    repeats go round every count, so slow drifts of the host spread over all of them."""
    runs = {n: [] for n in members}
    for r in range(repeats):
        print(f"bench run {r + 1} of {repeats}: members {members}", file=sys.stderr, flush=True)
        for n in members:
            out = subprocess.run(
                [os.path.join(build, "bench/elastic/control_plane_bench"), "--members", str(n),
                 "--steady-s", str(steady_s), "--max-s", "120"],
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


def summary(rows, phase, part=None, parts_key="agree_parts"):
    """Median, min, max and count of rows' `phase` (or of `part` in their `parts_key`)."""
    if part is not None:
        rows = [r[parts_key] for r in rows if r.get(parts_key)]
        phase = part
    values = [r[phase] for r in rows if r.get(phase) is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values), len(values)


# The simulator's host parameters (control_plane_sim's flags of these names, microseconds).
PARAMS = ("cpu-per-op", "wake-cpu", "connect", "dial-rtt", "link-rtt")


def simulate(build, members, store_ops, rtt_us, cores, params, extra=()):
    flags = []
    for name in PARAMS:
        flags += [f"--{name}-us", f"{params.get(name, 0.0):.3f}"]
    out = subprocess.run(
        [os.path.join(build, "bin/control_plane_sim"), *extra, "--gpus", ",".join(map(str, members)),
         "--store-ops", str(store_ops), "--rtt-us", str(rtt_us), "--host-cores", str(cores),
         *flags],
        capture_output=True, text=True, timeout=600, check=True)
    return {row["gpus"]: row for row in map(json.loads, out.stdout.splitlines())}


def bisect(figure, target, high=1000.0):
    """The x in [0, high] where figure(x), growing with x, meets target."""
    low = 0.0
    for _ in range(30):
        mid = (low + high) / 2
        if figure(mid) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def fit_store_cpu(sim, n, target_agree, target_abort, fit_wake):
    """cpu_per_op from the agreement and wake_cpu from the abort at n, each fitted with the
    other held, in turn until neither moves by more than 0.1 us (each phase grows with both)."""
    cpu_us, wake_us = 0.0, 0.0
    for _ in range(8):
        cpu_us = bisect(lambda x: sim([n], {"cpu-per-op": x, "wake-cpu": wake_us})[n]["agree_s"],
                        target_agree)
        if not fit_wake:
            break
        new_wake = bisect(
            lambda x: sim([n], {"cpu-per-op": cpu_us, "wake-cpu": x})[n]["abort_all_s"],
            target_abort)
        settled = abs(new_wake - wake_us) < 0.1
        wake_us = new_wake
        if settled:
            break
    return {"cpu-per-op": cpu_us, "wake-cpu": wake_us}


def part(row, key, name):
    return (row.get(key) or {}).get(name)


def fit_formation(sim, n, link_target, barrier_target, store_params, connect_us):
    """The formation's two round trips from its parts at n: link_rtt from the barriers (their
    messages' round trips, beside the receivers' CPU that cpu_per_op and wake_cpu already set)
    and dial_rtt from the links' part (the longest chain of dials), each fitted with the other
    held, in turn until neither moves by more than 1 us (the two parts share the host's CPU).
    The CPU per link set up is given (--connect-us), not fitted: the links' part at the larger
    counts, the only figure that could set it, is the prediction this compares."""
    params = {**store_params, "connect": connect_us, "dial-rtt": 0.0, "link-rtt": 0.0}

    def figure(name, **change):
        return part(sim([n], {**params, **change})[n], "form_parts", name)

    for _ in range(12):
        params["link-rtt"] = bisect(lambda x: figure("barrier_s", **{"link-rtt": x}),
                                    barrier_target, high=50000.0)
        dial = bisect(lambda x: figure("link_s", **{"dial-rtt": x}), link_target, high=50000.0)
        settled = abs(dial - params["dial-rtt"]) < 1.0
        params["dial-rtt"] = dial
        if settled:
            break
    return params


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
    p.add_argument("--connect-us", type=float, default=0.0,
                   help="a member's CPU per link set up, each end (not fitted; default 0: the "
                        "dial's round trip takes the links' whole time)")
    p.add_argument("--no-wake-fit", action="store_true",
                   help="keep wake_cpu at 0 and leave the abort unfitted (the model before "
                        "2026-12-05's second comparison), to compare the two on the same runs")
    p.add_argument("--save-runs", metavar="FILE", help="write the bench's JSON lines to FILE")
    p.add_argument("--bench-runs", metavar="FILE",
                   help="read the bench's JSON lines from FILE (a --save-runs file) instead of "
                        "running it; --repeats and --steady-s are then not used")
    a = p.parse_args()
    members = sorted(int(m) for m in a.members.split(","))
    if len(members) < 2:
        sys.exit("error: --members needs at least 2 counts: one to fit, one or more to predict")

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
    fit_sizes = members[:1]
    for n in fit_sizes:
        if any(med[n][ph] is None for ph in PHASES):
            sys.exit(f"error: no abort, agreement or formation figures at {n} members to fit on")
    link_target = summary(runs[fit_sizes[0]], None, "link_s", "form_parts")
    barrier_target = summary(runs[fit_sizes[0]], None, "barrier_s", "form_parts")
    if link_target is None or barrier_target is None:
        sys.exit(f"error: the bench's runs have no formation parts (form_parts) at {fit_sizes[0]} "
                 "members: runs saved before 2026-12-05 lack them; run the bench again")

    extra = ["--woken-reads-free"] if a.woken_reads_free else []

    def sim(sizes, params):
        return simulate(a.build, sizes, a.store_ops, a.rtt_us, a.host_cores, params, extra)

    first = med[fit_sizes[0]]
    store_params = fit_store_cpu(sim, fit_sizes[0], first["agree_s"][0], first["abort_all_s"][0],
                                 not a.no_wake_fit)
    params = fit_formation(sim, fit_sizes[0], link_target[0], barrier_target[0], store_params,
                           a.connect_us)
    predicted = sim(members, params)

    print(f"# host: {a.host_cores} cores; store {a.store_ops:.0f} ops/s, round trip {a.rtt_us} us")
    wake_at = "" if a.no_wake_fit else " and abort"
    print(f"# fitted at {fit_sizes[0]} members only: cpu_per_op and wake_cpu (agreement{wake_at}), "
          f"link_rtt (formation's barriers), dial_rtt (formation's links); connect given: " +
          ", ".join(f"{k} {params.get(k, 0.0):.1f} us" for k in PARAMS))
    if a.bench_runs:
        print(f"# bench: the runs saved in {a.bench_runs}; median [min-max] (runs with figures)")
    else:
        print(f"# bench: {a.repeats} runs of control_plane_bench --members {a.members} "
              f"--steady-s {a.steady_s}; median [min-max] (runs with figures)")
    flags = " ".join(f"--{k}-us {params.get(k, 0.0):.1f}" for k in PARAMS)
    print(f"# sim: {a.build}/bin/control_plane_sim {' '.join(extra)}{' ' if extra else ''}"
          f"--gpus {a.members} --store-ops {a.store_ops:.0f} --rtt-us {a.rtt_us} "
          f"--host-cores {a.host_cores} {flags}")
    print("| N | phase | bench median [min-max] (runs) | sim | sim/bench |")
    print("|---|---|---|---|---|")
    for n in members:
        for ph in PHASES:
            s = med[n][ph]
            got = predicted[n][ph]
            if s is None:
                print(f"| {n} | {ph} | failed in every run | {got:.4f} | - |")
                continue
            fitted = n == fit_sizes[0] and (ph != "abort_all_s" or not a.no_wake_fit)
            ratio = "fitted" if fitted else f"{got / s[0]:.2f}"
            print(f"| {n} | {ph} | {s[0]:.4f} [{s[1]:.4f}-{s[2]:.4f}] ({s[3]}) | {got:.4f} | "
                  f"{ratio} |")
    print_parts(members, runs, predicted, "agree_parts", "agree_s", AGREE_PARTS)
    print_parts(members, runs, predicted, "form_parts", "form_s", FORM_PARTS)


def print_parts(members, runs, predicted, key, phase, names):
    """A phase's parts side by side: where a miss of the phase comes from. Runs saved before the
    bench measured them have none; then nothing is printed."""
    if not any(r.get(key) for n in members for r in runs[n]):
        return
    print()
    print(f"| N | part of {phase} | bench median [min-max] (runs) | sim | sim/bench |")
    print("|---|---|---|---|---|")
    for n in members:
        sim_parts = predicted[n].get(key) or {}
        for part in names:
            s = summary(runs[n], None, part, key)
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
