#!/usr/bin/env bash
# How well a run's calibration follows the load its steps see on a shared GPU host, and what the throughput check
# would conclude under each rule (bench/throughput_rules.py reads what this leaves). One device call, ~8 minutes:
# with RECORD=N, first `harness record-baseline RECIPE --profile PROFILE --seeds N --force` (the baseline the runs
# below are then judged against; it comes back in the tarball); then `harness run qwen3_vl_30b --profile
# gpu-1x-h200` (40 steps) once cold (the warm start trained and cached, unless the recording did), then warm runs
# one after another, then runs with a 30 % slowdown injected (HARNESS_FAULT=slowdown:0.3), then one warm run under
# cProfile (smoke.prof). Each run's metrics.jsonl, manifest.json and verdict.json go to runs/NAME/, walls.json holds
# each run's wall time, rules.txt the rules' verdicts; all of it in $DEST/noise.tgz (a device call returns at most
# 8 files). A run is started only while the call has time left (BUDGET seconds).
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
RECORD=${RECORD:-0}
OUTER=$DEST; DEST=$(mktemp -d); mkdir -p "$DEST/runs"  # packed into $OUTER/noise.tgz at the end
rm -rf "$RUNS"; mkdir -p "$RUNS"
echo "set-up took ${SECONDS}s"
if [ "$RECORD" -gt 0 ]; then
  t0=$SECONDS
  timeout 400 "$PY" -m harness record-baseline "$RECIPE" --profile "$PROFILE" --seeds "$RECORD" --force $STEPS \
    --runs-dir "$RUNS/record" --quiet >"$DEST/record-baseline.log" 2>&1
  echo "record-baseline rc=$? wall=$((SECONDS - t0))s"; tail -3 "$DEST/record-baseline.log"
  mkdir -p "$DEST/baseline"; cp baselines/"$RECIPE"/"$PROFILE"-* "$DEST/baseline/" 2>/dev/null
  for d in "$RUNS"/record/seed-*; do mkdir -p "$DEST/runs/record-$(basename "$d")"
    cp "$d"/{metrics.jsonl,manifest.json} "$DEST/runs/record-$(basename "$d")/" 2>/dev/null; done
fi
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
"$PY" bench/throughput_rules.py "$DEST/runs" --json "$DEST/rules.json" 2>&1 | tee "$DEST/rules.txt"
for name in "$DEST"/runs/*/; do  # the product's own verdicts
  [ -f "$name/verdict.json" ] && "$PY" -c "import json,sys; v=json.load(open(sys.argv[1])); print(sys.argv[2], v['summary_line'][:150]); [print('   ', c['detail']) for c in v['checks'] if c['group'] == 'throughput']" "$name/verdict.json" "$(basename "$name")"
done | tee "$DEST/verdicts.txt"
tar -czf "$OUTER/noise.tgz" -C "$DEST" . && cp "$DEST"/{rules.txt,verdicts.txt} "$OUTER/" 2>/dev/null
