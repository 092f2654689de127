#!/usr/bin/env bash
# Checks the recovery protocol's Promela model (models/recovery/recovery.pml) with spin:
#
#   safety    props 1-4 as assertions + no invalid end state (deadlock), exhaustive
#   progress  LTL <> (every worker finished, fenced, crashed or stalled forever), exhaustive
#   mutation  the old rollback (-DBUGGY_COMMIT) must give a counterexample to prop. 2 or 3
#
# One line per property, then one per run (states, depth, errors, time). Exits non-zero on any
# error, or when the mutation finds none. About 35 s of CPU on this 2-core machine
# (docs/design/recovery-model.md has the measured figures).
#
#   models/recovery/check.sh              the CI runs (CTest `recovery_model`, label `model`)
#   models/recovery/check.sh --extended   also the bigger and the finding runs of the design note
#                                         (progress with -f; N=3 F=3; N=4 F=2; KEEP_DONE and
#                                         STRICT_FENCE, which must fail): about an hour, 8 GB
#
# Needs spin and a C compiler. Without spin it skips (exit 77), under CI=true it fails.
set -u
here="$(cd "${0%/*}" && pwd)"
model="$here/recovery.pml"
extended=0
[ "${1:-}" = "--extended" ] && extended=1

# shellcheck source=../require_spin.sh
source "$here/../require_spin.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
summary=()   # one line per run
props=()     # one line per property

# prepare NAME "SPIN_DEFS" "CC_DEFS": spin -a and the pan compile, in $work/NAME (may run in the
# background: it writes only there; "failed" in $work/NAME/status on error).
prepare() {
  local name="$1" sdefs="$2" cdefs="$3" d="$work/$1"
  mkdir -p "$d"
  cp "$model" "$d/recovery.pml"
  echo "$sdefs" >"$d/sdefs"
  echo "$cdefs" >"$d/cdefs"
  date +%s.%N >"$d/t0"
  # shellcheck disable=SC2086
  if ! (cd "$d" && spin -a $sdefs recovery.pml >spin.out 2>&1); then
    { echo "$name: spin -a failed:"; cat "$d/spin.out"; } >"$d/status"; return
  fi
  # shellcheck disable=SC2086
  if ! (cd "$d" && "$cc" -O2 -w $cdefs -o pan pan.c >cc.out 2>&1); then
    { echo "$name: compiling pan failed:"; cat "$d/cc.out"; } >"$d/status"; return
  fi
}

# execute NAME "PAN_ARGS" TIMEOUT_S: runs pan (may run in the background), then the trail's
# protocol events, if any, into $work/NAME.trace.
execute() {
  local name="$1" pargs="$2" limit="$3" d="$work/$1"
  echo "$pargs" >"$d/pargs"
  [ -s "$d/status" ] && return
  local TIMEFORMAT='%U %S'
  # shellcheck disable=SC2086
  { time (cd "$d" && timeout "$limit" ./pan $pargs >pan.out 2>&1; echo $? >rc); } 2>"$d/cpu.out"
  if [ -s "$d/recovery.pml.trail" ]; then
    # shellcheck disable=SC2046
    (cd "$d" && spin -t $(cat sdefs) recovery.pml 2>/dev/null | grep -E 'FAULT|w[0-9]' |
      grep -v '^ltl' >"$work/$name.trace")
  fi
  date +%s.%N >"$d/t1"
}

# collect NAME: sets r_states r_depth r_errors r_time r_cpu r_prop (the property of the first
# violated assertion, "" when none) r_msg (pan's error line) r_ok (1 when the search ran to its
# end, or stopped at an error) and adds the run's summary line.
collect() {
  local name="$1" d="$work/$1"
  r_states=""; r_depth=""; r_errors=""; r_time=""; r_cpu=""; r_prop=""; r_msg=""; r_ok=1
  if [ -s "$d/status" ]; then cat "$d/status"; r_ok=0; status=1; return; fi
  local rc; rc=$(cat "$d/rc")
  r_states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$d/pan.out" | head -1)
  r_depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$d/pan.out" | head -1)
  r_errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$d/pan.out" | head -1)
  r_time=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$d/pan.out" | head -1)
  r_cpu=$(awk '{printf "%.1f", $1 + $2}' "$d/cpu.out")
  r_msg=$(grep -m1 -E '^pan:[0-9]+: |^pan: ' "$d/pan.out" | grep -v 'elapsed time\|rate \|wrote ' || true)
  r_prop=$(sed -n 's/.*assertion violated ((\([0-9]\)==\1)&&.*/\1/p' "$d/pan.out" | head -1)
  if [ "$rc" -ne 0 ] || [ -z "$r_errors" ]; then
    r_ok=0
    echo "$name: pan did not finish (exit $rc):"; tail -20 "$d/pan.out"
  fi
  if [ "${r_errors:-1}" = 0 ] &&
    grep -q -E 'reached -DMEMLIM bound|max search depth too small|Search not completed' "$d/pan.out"; then
    r_ok=0
    echo "$name: the search was not exhaustive:"; grep -E 'MEMLIM|depth too small|not completed' "$d/pan.out"
  fi
  summary+=("$(printf '%-9s states=%s depth=%s errors=%s time=%ss cpu=%ss (with spin+cc: wall %.1fs)  spin -a %s; cc %s; pan %s' \
    "$name" "${r_states:-?}" "${r_depth:-?}" "${r_errors:-?}" "${r_time:-?}" "${r_cpu:-?}" \
    "$(awk "BEGIN{print $(cat "$d/t1") - $(cat "$d/t0")}")" "$(cat "$d/sdefs")" "$(cat "$d/cdefs")" \
    "$(cat "$d/pargs")")")
}

# Property line: NAME RUN DESCRIPTION, from the last run's figures.
prop_line() {  # prop_line ID DESCRIPTION VERDICT
  props+=("$(printf '%-5s %-52s %-8s states=%s depth=%s errors=%s time=%ss' "$1" "$2" "$3" \
    "${r_states:-?}" "${r_depth:-?}" "${r_errors:-?}" "${r_time:-?}")")
}

# Bounds of the CI runs: N=3 workers, F=2 faults, STEPS=3, epochs 0..3 (EMAX=4: the model asserts
# it is never exceeded). -m: DFS depth limit (the deepest path is under 1,100 steps).
bounds="-DN=3 -DF=2 -DSTEPS=3 -DEMAX=4"
pan_mem="-DMEMLIM=2048"

# The three CI runs, two at a time (2 cores): compile all, then progress alongside safety+buggy.
# 1. Safety, exhaustive: crashes and pauses (a pause that never ends is a stall forever as far as
#    any safety property can tell: every prefix of it is explored), at most 2 pauses.
# 2. Progress: LTL <> ALLDONE (every worker not crashed or stalled forever finishes or is
#    fenced), crashes, stalls forever and one pause. No weak fairness (-f): with no accepting
#    cycle found without it, none exists with it (fairness only removes runs); the model's
#    counters make every run finite but for the stutter at its end.
# 3. Mutation: the old rollback must be caught (a counterexample to prop. 2 or 3), with crashes
#    and stalls forever only (the shortest story: it needs no pause).
prepare safety "$bounds -DNO_STUCK" "-DSAFETY -DNOCLAIM $pan_mem" &
prepare progress "$bounds -DPMAX=1" "$pan_mem" &
wait
prepare buggy "$bounds -DNO_PAUSE -DBUGGY_COMMIT" "-DSAFETY -DNOCLAIM $pan_mem" &
pid_buggy=$!
execute progress "-a -m20000 -N progress" 300 &
pid_progress=$!
execute safety "-m20000" 300
wait $pid_buggy
execute buggy "-m20000" 120
wait $pid_progress

# The last collected run ended with no error and no violation.
clean_run() { [ "$r_ok" = 1 ] && [ "${r_errors:-1}" = 0 ]; }
# The last collected run's first violation was of property $1.
# shellcheck disable=SC2317  # called through expect
violated() { [ "$r_prop" = "$1" ]; }
# expect ID DESCRIPTION CHECK...: a property line, OK when the command CHECK... succeeds, else FAIL
# (and the script fails).
expect() {
  local id=$1 text=$2 v=FAIL
  shift 2
  "$@" && v=OK
  [ $v = OK ] || status=1
  prop_line "$id" "$text" "$v"
}
# run_model NAME "SPIN_DEFS" "CC_DEFS" "PAN_ARGS" TIMEOUT_S: prepare, execute and collect one run
# in the foreground.
run_model() {
  prepare "$1" "$2" "$3"
  execute "$1" "$4" "$5"
  collect "$1"
}

verdict() {  # verdict PROPNUM -> OK / FAIL / n/a (another property failed first)
  if clean_run; then echo OK;
  elif [ "$r_prop" = "$1" ]; then echo FAIL; else echo "n/a"; fi
}
collect safety
prop_line P1 "one member list per epoch" "$(verdict 1)"
prop_line P2 "no update lost or applied twice (state == claim)" "$(verdict 2)"
prop_line P3 "replicas never diverge (start, base layout, end)" "$(verdict 3)"
prop_line P4 "a fenced worker never writes as a member" "$(verdict 4)"
if clean_run; then dl=OK; else dl=FAIL; fi
prop_line DL "no invalid end state (no deadlock)" "$dl"
if ! clean_run; then
  status=1
  echo "safety: $r_msg"
  [ -f "$work/safety.trace" ] && { echo "safety counterexample:"; cat "$work/safety.trace"; }
fi

collect progress
expect LIVE "progress: <> every survivor finished or fenced (LTL)" clean_run
if ! clean_run; then
  echo "progress: $r_msg"
  [ -f "$work/progress.trace" ] && { echo "progress counterexample:"; cat "$work/progress.trace"; }
fi

collect buggy
if [ "${r_errors:-0}" -ge 1 ] && { [ "$r_prop" = 2 ] || [ "$r_prop" = 3 ]; }; then
  v="OK"
else
  v="FAIL"; status=1
  echo "buggy: BUGGY_COMMIT found no counterexample to prop. 2 or 3 (${r_msg:-none})"
fi
depth_err=$(sed -n 's/.*(at depth \([0-9]*\)).*/\1/p' "$work/buggy/pan.out" | head -1)
prop_line MUT "BUGGY_COMMIT caught: prop. ${r_prop:-none}, at depth ${depth_err:-?}" "$v"
bug_trace="$work/buggy.trace"

if [ $extended = 1 ]; then
  run_model progress_f "$bounds -DPMAX=1" "$pan_mem" "-a -f -m20000 -N progress" 900
  expect LIVEf "progress under weak fairness (-f), as LIVE" clean_run
  big_mem="-DMEMLIM=8000"
  run_model safety_f3 "-DN=3 -DF=3 -DPMAX=1 -DSTEPS=3 -DEMAX=6 -DNO_STUCK" \
    "-DSAFETY -DNOCLAIM -DCOLLAPSE $big_mem" "-m20000" 3600
  expect F3 "props 1-4 + no deadlock, N=3 F=3 (crash, 1 pause)" clean_run
  run_model safety_n4 "-DN=4 -DF=2 -DSTEPS=3 -DEMAX=4 -DNO_PAUSE" \
    "-DSAFETY -DNOCLAIM -DCOLLAPSE $big_mem" "-m20000" 3600
  expect N4 "props 1-4 + no deadlock, N=4 F=2 (crash, stall)" clean_run
  run_model keep_done "-DN=3 -DF=3 -DSTEPS=3 -DEMAX=6 -DNO_STUCK -DKEEP_DONE" \
    "-DSAFETY -DNOCLAIM $pan_mem" "-m20000" 120
  expect KD "KEEP_DONE (literal prev switch) must fail prop. 3: ${r_prop:-none}" violated 3
  keep_trace="$work/keep_done.trace"
  run_model strict "$bounds -DNO_STUCK -DSTRICT_FENCE" "-DSAFETY -DNOCLAIM $pan_mem" "-m20000" 120
  expect SF "STRICT_FENCE (no update once left out) must fail prop. 4: ${r_prop:-none}" violated 4
  strict_trace="$work/strict.trace"
fi

echo "recovery model: $(spin -V | head -1); $bounds"
for l in "${props[@]}"; do echo "$l"; done
echo "runs:"
for l in "${summary[@]}"; do echo "  $l"; done
if [ -f "$bug_trace" ]; then
  echo "BUGGY_COMMIT counterexample (trail of $(wc -l <"$bug_trace") protocol events):"
  sed 's/^ */  /' "$bug_trace"
fi
if [ $extended = 1 ]; then
  for f in ${keep_trace:-} ${strict_trace:-}; do
    [ -f "$f" ] && { echo "$(basename "$f" .trace) counterexample:"; sed 's/^ */  /' "$f"; }
  done
fi
if [ $status -ne 0 ]; then echo "recovery model: FAILED"; else echo "recovery model: all checks passed"; fi
exit $status
