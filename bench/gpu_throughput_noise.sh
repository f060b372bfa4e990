#!/usr/bin/env bash
# How well a run's calibration follows the load its steps see on a shared GPU host, and what the throughput check
# would conclude under each rule (bench/throughput_rules.py reads what this leaves). One device call, ~8 minutes:
# `harness run qwen3_vl_30b --profile gpu-1x-h200` (40 steps) once cold (the warm start trained and cached), then
# warm runs one after another, then runs with a 30 % slowdown injected (HARNESS_FAULT=slowdown:0.3), then one warm
# run under cProfile ($DEST/smoke.prof). Each run's metrics.jsonl, manifest.json and verdict.json are kept in
# $DEST/runs/NAME/; $DEST/walls.json holds each run's wall time. A run is started only while the call has time left.
# Usage (device): DEST=$OUT bash bench/gpu_throughput_noise.sh   (CPU dry run: PROFILE=cpu RECIPE=qwen3_1_7b STEPS=3)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
RUNS=${RUNS:-/tmp/noise-runs}
PROFILE=${PROFILE:-gpu-1x-h200}
RECIPE=${RECIPE:-qwen3_vl_30b}
STEPS=${STEPS:+--steps $STEPS}
WARM=${WARM:-4}
SLOW=${SLOW:-2}
BUDGET=${BUDGET:-500}  # seconds of this call after which no new run starts
rm -rf "$RUNS"; mkdir -p "$RUNS" "$DEST/runs"
echo "set-up took ${SECONDS}s"
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }
walls=()
one() {  # name, then the command's prefix (env / profiler) before `-m harness`
  local name=$1; shift
  if [ "$SECONDS" -gt "$BUDGET" ]; then echo "$name skipped: ${SECONDS}s into the call"; return; fi
  local t0; t0=$(date +%s.%N)
  timeout 300 env "$@" -m harness run "$RECIPE" --profile "$PROFILE" $STEPS --quiet --out "$RUNS/$name" \
    >"$DEST/runs-$name.log" 2>&1
  local rc=$? w; w=$(since "$t0")
  mkdir -p "$DEST/runs/$name"
  cp "$RUNS/$name"/{metrics.jsonl,manifest.json,verdict.json} "$DEST/runs/$name/" 2>/dev/null
  echo "$name rc=$rc wall=${w}s"
  walls+=("\"$name\": {\"rc\": $rc, \"wall_s\": $w}")
}
one cold "$PY"
for i in $(seq 1 "$WARM"); do one "warm$i" "$PY"; done
for i in $(seq 1 "$SLOW"); do one "slow$i" HARNESS_FAULT=slowdown:0.3 "$PY"; done
one profiled "$PY" -m cProfile -o "$DEST/smoke.prof"
t0=$(date +%s.%N); "$PY" -m harness --help >/dev/null 2>&1; help=$(since "$t0")
( IFS=,; echo "{${walls[*]}, \"harness --help\": {\"wall_s\": $help}, \"cpus\": $(nproc), \"device\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)\"}" ) \
  >"$DEST/walls.json"
cat "$DEST/walls.json"
"$PY" bench/throughput_rules.py "$DEST/runs" 2>&1 | tee "$DEST/rules.txt"
