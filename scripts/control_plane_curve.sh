#!/usr/bin/env bash
# Regenerates configs/sim/control_plane_curve.json: the control plane's phases after one fault
# (abort_all_s: fault -> every survivor aborted; agree_s: -> every survivor agreed; form_s: ->
# every survivor formed its groups), simulated by control_plane_sim with the domain hierarchy in
# NVL72 domains, for a kill and a hang, at whole-domain GPU counts from 144 to 102,384. `ntp sim`
# prices NTP-LIVE's detect, agree and rebuild phases from it (docs/sim.md "The control plane
# curve"); tests/sim/control_plane_curve_test.cpp reruns the small points and fails when the file
# is stale.
#
#   scripts/control_plane_curve.sh [OUT] [GPUS]
#     OUT   default configs/sim/control_plane_curve.json
#     GPUS  comma-separated whole multiples of 72, default below; the 102,384 point takes minutes
#
# Needs build/bin/control_plane_sim (ninja -C build control_plane_sim). The simulation is
# deterministic by seed: the figures depend on the code, not on this host's load.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/configs/sim/control_plane_curve.json}"
gpus="${2:-144,1152,4608,16416,32256,51264,102384}"
tp=72
hang_detect_ms=1000
bin="$root/build/bin/control_plane_sim"
[ -x "$bin" ] || { echo "control_plane_curve.sh: build $bin first (ninja -C build control_plane_sim)" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for fault in kill hang; do
  cmd=("$bin" --hierarchy --tp "$tp" --hang-detect-ms "$hang_detect_ms" --gpus "$gpus" --fault "$fault")
  echo "control_plane_curve.sh: ${cmd[*]#"$root/"}" >&2
  start=$(date +%s)
  "${cmd[@]}" >"$tmp/$fault.jsonl"
  echo "control_plane_curve.sh: $fault took $(($(date +%s) - start)) s" >&2
done

command="build/bin/control_plane_sim --hierarchy --tp $tp --hang-detect-ms $hang_detect_ms --gpus $gpus --fault kill (and --fault hang)"
commit="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$root" status --porcelain -- src 2>/dev/null)" ]; then commit="$commit+dirty"; fi
jq -n \
  --arg what "control_plane_sim --hierarchy: per GPU count and fault, the control plane's phases in seconds of virtual time (abort_all_s from the fault, agree_s from the last abort, form_s from the last agreement). Regenerate: scripts/control_plane_curve.sh" \
  --arg command "$command" \
  --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  --arg host "$(hostname)" \
  --arg commit "$commit" \
  --argjson domain "$tp" \
  --argjson hang_detect_s "$(echo "$hang_detect_ms" | awk '{print $1 / 1000}')" \
  --slurpfile kill "$tmp/kill.jsonl" \
  --slurpfile hang "$tmp/hang.jsonl" \
  '{what: $what, command: $command, date: $date, host: $host, commit: $commit, domain: $domain,
    hang_detect_s: $hang_detect_s, runs: {kill: $kill, hang: $hang}}' >"$out.tmp"
mv "$out.tmp" "$out"
echo "control_plane_curve.sh: wrote $out" >&2
