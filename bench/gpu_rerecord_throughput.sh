#!/usr/bin/env bash
# Re-record the GPU throughput references that predate the per-step samples (issue: every GPU throughput reference
# solo, and judged on the per-step scale where the samples narrow the seeds' spread). One device call, ~6 min:
# `harness record-baseline R --profile gpu-1x-h200 --scale S --throughput-only --force --seeds N` for each entry
# below, one run at a time (the tool refuses a throughput reference while another process shares the device);
# only the baseline's throughput reference changes. The rewritten baselines, each command's log and a summary
# (rerecord.txt: value, per-step value, seeds' spread before and after) come back in $DEST/rerecord.tgz.
# Usage (device): DEST=$OUT bash bench/gpu_rerecord_throughput.sh   (CPU dry run: PROFILE=cpu ONLY=qwen3_1_7b:smoke:2 STEPS=2)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
PROFILE=${PROFILE:-gpu-1x-h200}
ONLY=${ONLY:-qwen3_1_7b:smoke:3 qwen3_30b_a3b:smoke:3 qwen3_30b_a3b:reduced:2}  # recipe:scale:seeds
STEPS=${STEPS:+--steps $STEPS}
BUDGET=${BUDGET:-480}  # seconds of this call after which no new recording starts
OUTER=$DEST; DEST=$(mktemp -d)
summary() {  # the baseline's throughput reference on this device: value, per-step value, spread
  "$PY" - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("throughput", {}).get("references", []):
    ps = r.get("per_step") or {}
    print(f"  {r['device_model']}: value {r['value']:.0f} tok/s, spread {r['relative_spread']:.3f}, seeds "
          f"{[round(v) for v in r['seed_values']]}, solo {r.get('solo')}, per_step "
          + (f"{ps.get('value', 0):.0f} (spread {ps.get('relative_spread', 0):.3f})" if ps else "none"))
PY
}
for entry in $ONLY; do
  IFS=: read -r recipe scale seeds <<<"$entry"
  file=baselines/$recipe/$PROFILE-$scale.json
  if [ "$SECONDS" -gt "$BUDGET" ]; then echo "$entry skipped: ${SECONDS}s into the call" | tee -a "$DEST/rerecord.txt"; continue; fi
  { echo "$entry before:"; summary "$file"; } | tee -a "$DEST/rerecord.txt"
  t0=$SECONDS
  timeout 300 "$PY" -m harness record-baseline "$recipe" --profile "$PROFILE" --scale "$scale" --seeds "$seeds" \
    --throughput-only --force $STEPS --runs-dir "/tmp/rerecord/$recipe-$scale" --quiet >"$DEST/$recipe-$scale.log" 2>&1
  rc=$?
  { echo "$entry rc=$rc wall=$((SECONDS - t0))s after:"; summary "$file"; tail -2 "$DEST/$recipe-$scale.log"; } \
    | tee -a "$DEST/rerecord.txt"
  mkdir -p "$DEST/baselines/$recipe" && cp "$file" "$DEST/baselines/$recipe/"
done
tar -czf "$OUTER/rerecord.tgz" -C "$DEST" . && cp "$DEST/rerecord.txt" "$OUTER/"
