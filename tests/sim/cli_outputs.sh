#!/bin/sh
# `ntp sim` outputs end to end: tables per sweep point, JSON, CSV files, plots (when gnuplot is
# installed), snapshot mode, and determinism per seed. Usage: cli_outputs.sh NTP_BINARY SOURCE_DIR
ntp="$1"
cfg="$2/configs/sim/paper-b200-nvl32.toml"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
die() { echo "FAIL: $*"; fail=1; }

"$ntp" sim --config "$cfg" --trials 2 --days 2 --sweep failures.rate_multiplier=1,3 \
  --csv "$tmp/csv" >"$tmp/table" 2>"$tmp/err" || die "sweep run failed: $(cat "$tmp/err")"
[ "$(grep -c '^== failures.rate_multiplier=' "$tmp/table")" -eq 2 ] || die "expected 2 sweep tables"
[ "$(grep -c '^NTP-PW ' "$tmp/table")" -eq 2 ] || die "expected an NTP-PW row per sweep point"
head -1 "$tmp/csv/summary.csv" | grep -q '^sweep,policy,trials' || die "summary.csv header"
# 2 sweep points x 6 policies + header.
[ "$(wc -l <"$tmp/csv/summary.csv")" -eq 13 ] || die "summary.csv rows: $(wc -l <"$tmp/csv/summary.csv")"
for v in 1 3; do
  s="$tmp/csv/series-failures.rate_multiplier_$v.csv"
  [ -f "$s" ] || die "missing $s"
  # 2 days of hourly points + header.
  [ "$(wc -l <"$s")" -eq 49 ] || die "$s rows: $(wc -l <"$s")"
done

"$ntp" sim --config "$cfg" --trials 2 --days 2 --seed 5 --json >"$tmp/a.json" || die "json run"
"$ntp" sim --config "$cfg" --trials 2 --days 2 --seed 5 --json >"$tmp/b.json" || die "json run 2"
cmp -s "$tmp/a.json" "$tmp/b.json" || die "same seed, different JSON"
grep -q '"name": "NTP-LIVE"' "$tmp/a.json" || die "JSON lacks NTP-LIVE"
grep -q '"spares_needed"' "$tmp/a.json" || die "JSON lacks spares_needed"
"$ntp" sim --config "$cfg" --trials 2 --days 2 --seed 6 --json >"$tmp/c.json" || die "json run 3"
cmp -s "$tmp/a.json" "$tmp/c.json" && die "different seeds, same JSON"

"$ntp" sim --config "$cfg" --set parallel.pp=1 --failed-fraction 0,0.004 >"$tmp/snap" ||
  die "snapshot run"
grep -q '^0.4 ' "$tmp/snap" || die "snapshot row for 0.4%"

# NTP-LIVE's recovery cost: the breakdown alone, its flags, and the calibration against a real
# run's metrics (tests/sim/data: the toy job of docs/recovery.md with slot 0:3 killed and repaired).
"$ntp" sim --config "$cfg" --recovery-cost >"$tmp/cost" || die "recovery-cost run"
grep -q 'one GPU lost (TP 32 -> 28)' "$tmp/cost" || die "no failure breakdown: $(cat "$tmp/cost")"
grep -q 'control plane (detect, agree, rebuild): curve ' "$tmp/cost" ||
  die "the shipped config is not priced by the control-plane curve: $(cat "$tmp/cost")"
"$ntp" sim --config "$cfg" --recovery-cost --control-plane ops-model --formation-s 10 \
  >"$tmp/cost10" || die "--formation-s"
grep -q 'rebuild 10.00 +' "$tmp/cost10" || die "--formation-s ignored: $(cat "$tmp/cost10")"
grep -q 'control plane (detect, agree, rebuild): ops-model' "$tmp/cost10" ||
  die "--control-plane ops-model not reported: $(cat "$tmp/cost10")"
grep -q '"live_recovery"' "$tmp/a.json" || die "JSON lacks live_recovery"
grep -q '"model": "curve"' "$tmp/a.json" || die "JSON lacks live_recovery.control_plane.model"
"$ntp" sim --config "$2/configs/sim/toy-live.toml" --json \
  --calibrate-from "$2/tests/sim/data/toy-live-metrics.jsonl" >"$tmp/cal.json" || die "calibrate"
grep -q '"reshard_bytes": 140928' "$tmp/cal.json" || die "measured leader bytes missing"
grep -q '"predicted_leader_bytes": 140928' "$tmp/cal.json" || die "predicted leader bytes differ"
"$ntp" sim --config "$2/configs/sim/toy-live.toml" \
  --calibrate-from "$2/tests/sim/data/toy-live-metrics.jsonl" >"$tmp/cal" || die "calibrate table"
grep -q '^fitted: ' "$tmp/cal" || die "no fitted constants: $(cat "$tmp/cal")"

# Fail-slow: enabled at rate 0 the table, JSON and CSV files are today's, byte for byte; active,
# the fail-slow table follows the tables and fail_slow.csv joins the CSV files.
"$ntp" sim --config "$cfg" --trials 2 --days 2 --csv "$tmp/fs0" >"$tmp/fs0.txt" || die "plain run"
"$ntp" sim --config "$cfg" --trials 2 --days 2 --fail-slow --slow-rate 0 --csv "$tmp/fs1" \
  >"$tmp/fs1.txt" || die "rate 0 run"
cmp -s "$tmp/fs0.txt" "$tmp/fs1.txt" || die "fail-slow at rate 0 changed the table"
for f in "$tmp"/fs0/*; do cmp -s "$f" "$tmp/fs1/$(basename "$f")" || die "rate 0 changed $(basename "$f")"; done
[ "$(ls "$tmp/fs0" | wc -l)" -eq "$(ls "$tmp/fs1" | wc -l)" ] || die "rate 0 wrote other files"
"$ntp" sim --config "$cfg" --trials 2 --days 2 --seed 5 --set fail_slow.enabled=true \
  --set fail_slow.rate_per_gpu_day=0 --json >"$tmp/fs.json" || die "rate 0 json"
cmp -s "$tmp/a.json" "$tmp/fs.json" || die "fail-slow at rate 0 changed the JSON"
pol='sim.policies=["NTP", "NTP+SHARE", "NTP+REBALANCE", "NTP-PW+BOOST", "NTP+DROP"]'
"$ntp" sim --config "$cfg" --trials 2 --days 2 --fail-slow --set "$pol" \
  --sweep fail_slow.rate_multiplier=0,1,4 --csv "$tmp/fs" >"$tmp/fs.txt" 2>"$tmp/err" ||
  die "fail-slow sweep: $(cat "$tmp/err")"
grep -q '^fail-slow: throughput loss per policy' "$tmp/fs.txt" || die "no fail-slow table"
grep -q '^fail-slow: goodput per policy' "$tmp/fs.txt" || die "no fail-slow goodput table"
# 3 rows in each of the two blocks (throughput loss, goodput).
[ "$(grep -c '^fail_slow.rate_multiplier=' "$tmp/fs.txt")" -eq 6 ] || die "fail-slow table rows"
# 3 sweep points x 5 policies + header.
[ "$(wc -l <"$tmp/fs/fail_slow.csv")" -eq 16 ] || die "fail_slow.csv rows: $(wc -l <"$tmp/fs/fail_slow.csv")"
grep -q '^fail_slow.rate_multiplier=4,NTP+REBALANCE,' "$tmp/fs/fail_slow.csv" || die "fail_slow.csv row"
head -1 "$tmp/fs/fail_slow.csv" | grep -q ',fail_slow_goodput_loss,fail_slow_goodput_loss_ci95$' ||
  die "fail_slow.csv header lacks the goodput loss"
"$ntp" sim --config "$cfg" --trials 1 --days 1 --slow-factor 0.5 --json >"$tmp/fs2.json" ||
  die "--slow-factor run"
grep -q '"fail_slow_loss"' "$tmp/fs2.json" || die "JSON lacks fail_slow_loss"
grep -q '"fail_slow_goodput_loss"' "$tmp/fs2.json" || die "JSON lacks fail_slow_goodput_loss"
grep -q '"fail_slow_loss"' "$tmp/a.json" && die "JSON without fail-slow has fail_slow_loss"

if command -v gnuplot >/dev/null 2>&1; then
  "$ntp" sim --config "$cfg" --trials 1 --days 1 --plot "$tmp/plot" >/dev/null 2>"$tmp/err" ||
    die "plot run: $(cat "$tmp/err")"
  [ -s "$tmp/plot/capacity.svg" ] || die "no capacity.svg"
  [ -s "$tmp/plot/capacity.png" ] || die "no capacity.png"
fi
exit $fail
