#!/bin/sh
# Bad input to `ntp sim` and `ntp power plan`: exit code 2, one stderr line naming the key and the
# value, nothing on stdout. Usage: cli_bad_input.sh NTP_BINARY SOURCE_DIR
ntp="$1"
cfg="$2/configs/sim/paper-b200-nvl32.toml"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check EXPECTED_SUBSTRING ARGS...
  want="$1"
  shift
  "$ntp" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 2 ] || [ -s "$tmp/out" ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] ||
    ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: ntp $* -> rc=$rc, stderr: $(cat "$tmp/err"), stdout bytes: $(wc -c <"$tmp/out")"
    fail=1
  fi
}
check "model.layerz" sim --config "$cfg" --set model.layerz=3
check "failures.rate_per_gpu_day" sim --config "$cfg" --set failures.rate_per_gpu_day=-1
check "parallel.domain_size = 30" sim --config "$cfg" --set parallel.domain_size=30 --set system.gpus=30720
check "does not fit" sim --config "$cfg" --set parallel.min_degree=2 --set parallel.degree_multiple=1
check "recovery.hang_fraction" sim --config "$cfg" --hang-fraction 2
check "cannot read metrics file" sim --config "$cfg" --calibrate-from "$tmp/none.jsonl"
check "model.hidden" sim --config "$cfg" --set model.hidden=20000
check "BOGUS" sim --config "$cfg" --set 'sim.policies=["BOGUS"]'
check "--failed-fraction" sim --config "$cfg" --failed-fraction 2
# Snapshot mode has no time axis: flags it cannot honour are refused, not ignored.
check "--csv does not apply to --failed-fraction" sim --config "$cfg" --failed-fraction 0.001 --csv "$tmp/csv"
check "--plot does not apply to --failed-fraction" sim --config "$cfg" --failed-fraction 0.001 --plot "$tmp/plot"
check "--days does not apply to --failed-fraction" sim --config "$cfg" --failed-fraction 0.001 --days 3
[ -e "$tmp/csv" ] || [ -e "$tmp/plot" ] && { echo "FAIL: a refused run wrote files"; fail=1; }
# Fail-slow: a negative rate, a factor outside (0, 1], a duration <= 0, an impossible mitigation.
check "fail_slow.rate_per_gpu_day' = -1" sim --config "$cfg" --slow-rate -1
check "fail_slow.factors entry 1.5 is outside (0, 1]" sim --config "$cfg" --slow-factor 1.5
check "fail_slow.factors entry 0 is outside (0, 1]" sim --config "$cfg" --set fail_slow.factors=[0.5,0]
check "fail_slow.mean_hours' = 0" sim --config "$cfg" --slow-hours 0 --csv "$tmp/slowcsv"
check "fail_slow.mean_hours' = -3" sim --config "$cfg" --set fail_slow.mean_hours=-3
check "REBALANCE needs an NTP policy" sim --config "$cfg" --set 'sim.policies=["DP-DROP+REBALANCE"]'
[ -e "$tmp/slowcsv" ] && { echo "FAIL: a refused fail-slow run wrote files"; fail=1; }
check "cannot read config" sim --config "$tmp/missing.toml"
check "--failed 40" power plan --failed 40
check "--speed" power plan --speed 1.5
# And a good run prints a table on stdout and nothing on stderr.
"$ntp" sim --config "$cfg" --trials 1 --days 1 >"$tmp/out" 2>"$tmp/err" || fail=1
grep -q "NTP-PW" "$tmp/out" || { echo "FAIL: no table"; fail=1; }
[ -s "$tmp/err" ] && { echo "FAIL: stderr on success: $(cat "$tmp/err")"; fail=1; }
exit $fail
