#!/usr/bin/env bash
# Checks the domain hierarchy's Promela model (models/hierarchy/hierarchy.pml) with spin:
#
#   one-fault    a crash or a pause of any slot: properties 1-3, exhaustive
#   two-faults   a crash and a pause that ends, in different domains: a bitstate search (partial:
#                at -w27 the hash factor is about 3, so many states may be missed)
#   relay-one-key, take-any-list
#                the two mends undone (RELAY_ONE_KEY, TAKE_ANY_LIST), two faults: each must give a
#                counterexample
#   leader-no-wait
#                a leader that marks the global epoch done before its whole domain is done on it
#                (LEADER_NO_WAIT), two faults: must give a counterexample (property 5)
#
# One line per run. Exits non-zero on any error, or when a mutation finds none. About 90 s of CPU
# and 0.3 GB on a 2-core machine. Needs spin and a C compiler; without spin it skips (exit 77),
# under CI=true it fails.
set -u
here="$(cd "${0%/*}" && pwd)"
# shellcheck source=../require_spin.sh
source "$here/../require_spin.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0

# run NAME EXPECT "SPIN_DEFS" "CC_DEFS" "PAN_ARGS": EXPECT is "clean" or "counterexample".
run() {
  local name="$1" expect="$2" sdefs="$3" cdefs="$4" pargs="$5" d="$work/$1"
  mkdir -p "$d" && cp "$here/hierarchy.pml" "$d/"
  # shellcheck disable=SC2086
  if ! (cd "$d" && spin -a $sdefs hierarchy.pml >spin.out 2>&1 &&
    "$cc" -O2 -w $cdefs -o pan pan.c >cc.out 2>&1); then
    echo "$name: spin -a or the compile failed:"; cat "$d/spin.out" "$d/cc.out"; status=1; return
  fi
  # shellcheck disable=SC2086
  (cd "$d" && timeout 600 ./pan $pargs >pan.out 2>&1)
  local errors states elapsed got
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$d/pan.out" | head -1)
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$d/pan.out" | head -1)
  elapsed=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$d/pan.out" | head -1)
  if [ -z "$errors" ]; then
    got="unfinished"
  elif [ "$errors" = 0 ]; then
    got="clean"
  else
    got="counterexample"
  fi
  if [ "$got" = clean ] && grep -q -E 'max search depth too small|Search not completed' "$d/pan.out"; then
    got="unfinished"
  fi
  local verdict=OK
  [ "$got" = "$expect" ] || { verdict=FAIL; status=1; }
  printf '%-14s %-4s expected %-14s got %-14s states=%s time=%ss  spin -a %s; cc %s; pan %s\n' \
    "$name" "$verdict" "$expect" "$got" "${states:-?}" "${elapsed:-?}" "$sdefs" "$cdefs" "$pargs"
  if [ "$verdict" = FAIL ]; then
    grep -m3 -E '^pan:' "$d/pan.out"
    if [ -s "$d/hierarchy.pml.trail" ]; then
      # shellcheck disable=SC2086
      (cd "$d" && spin -t -g $sdefs hierarchy.pml 2>&1 | tail -40)
    fi
  fi
}

run one-fault clean "-DF=1" "-DSAFETY" "-m400000"
run relay-one-key counterexample "-DF=2 -DRELAY_ONE_KEY" "-DSAFETY -DBITSTATE" "-m400000 -w27"
run take-any-list counterexample "-DF=2 -DTAKE_ANY_LIST" "-DSAFETY -DBITSTATE" "-m400000 -w27"
run leader-no-wait counterexample "-DF=2 -DLEADER_NO_WAIT" "-DSAFETY -DBITSTATE" "-m400000 -w27"
run two-faults clean "-DF=2" "-DSAFETY -DBITSTATE" "-m400000 -w27"
echo "hierarchy model: $(spin -V | head -1)"
if [ $status -ne 0 ]; then echo "hierarchy model: FAILED"; else echo "hierarchy model: all checks passed"; fi
exit $status
