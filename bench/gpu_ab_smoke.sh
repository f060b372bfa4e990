#!/usr/bin/env bash
# The GPU smoke before and after a change of the harness, on one device, in one call: the wall time of warm runs of
# both trees taken in turns (A B A B ...: the host's drift falls on both), and whether they train the same bits.
# The "before" tree is build/base/harness (made here with `git archive BASE harness | tar -x -C build/base`, carried
# to the device as `build`); it replaces harness/ in a copy of this checkout, so recipes, baselines and the carried
# wheels are the same for both; `--runtime local`, so that each tree's own code trains (a container would run its
# image's). Each tree first runs once cold (its warm start: the cache key holds the core's source), then WARM warm
# runs each, then one warm run of the new tree under cProfile ($DEST/smoke.prof).
# $DEST/ab.json: each run's wall, exit code and verdict line; $DEST/same_bits.txt: every non-timing metric of the
# two trees' runs compared value by value (bench/compare_metrics.py); $DEST/runs.tgz: each run's records and log
# (six files in all: a device call returns at most eight).
# Usage (device): DEST=$OUT bash bench/gpu_ab_smoke.sh     (CPU dry run: PROFILE=cpu RECIPE=qwen3_1_7b STEPS=2 WARM=1)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
RUNS=${RUNS:-/tmp/ab-runs}
PROFILE=${PROFILE:-gpu-1x-h200}
RECIPE=${RECIPE:-qwen3_vl_30b}
STEPS=${STEPS:+--steps $STEPS}
WARM=${WARM:-2}
BUDGET=${BUDGET:-520}  # seconds of this call after which no new run starts
[ -d build/base/harness ] || { echo "no build/base/harness (the tree to compare with)"; exit 2; }
BASE=${BASE_DIR:-/tmp/ab-base}
rm -rf "$RUNS" "$BASE"; mkdir -p "$RUNS" "$BASE"
tar --exclude=./build --exclude=./.whl --exclude=./.git --exclude=./harness -cf - . | tar -xf - -C "$BASE"
cp -a build/base/harness "$BASE/harness"
"$PY" -m compileall -q -j 0 "$BASE/harness" >/dev/null 2>&1
echo "set-up took ${SECONDS}s"
rows=()
one() {  # tree (base|new), run name, then the command's prefix before `-m harness`
  local tree=$1 name=$2; shift 2
  if [ "$SECONDS" -gt "$BUDGET" ]; then echo "$name skipped: ${SECONDS}s into the call"; return; fi
  local dir=$PWD; [ "$tree" = base ] && dir=$BASE
  local t0 rc w line; t0=$(date +%s.%N)
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout 300 "$@" -m harness run "$RECIPE" --profile "$PROFILE" $STEPS \
    --runtime local --quiet --out "$RUNS/$name" >"$RUNS/$name.log" 2>&1)
  rc=$?; w=$(since "$t0")
  line=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['summary_line'][:160])" "$RUNS/$name/verdict.json" 2>/dev/null | tr -d '"')
  echo "$name rc=$rc wall=${w}s $line"
  rows+=("\"$name\": {\"tree\": \"$tree\", \"rc\": $rc, \"wall_s\": $w, \"verdict\": \"$line\"}")
}
one base base-cold "$PY"
one new new-cold "$PY"
for i in $(seq 1 "$WARM"); do one base "base-warm$i" "$PY"; one new "new-warm$i" "$PY"; done
one new new-profiled "$PY" -m cProfile -o "$DEST/smoke.prof"
( IFS=,; echo "{${rows[*]}, \"cpus\": $(nproc), \"device\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)\"}" ) \
  >"$DEST/ab.json"
cat "$DEST/ab.json"
for i in $(seq 1 "$WARM"); do
  "$PY" bench/compare_metrics.py "$RUNS/base-warm$i" "$RUNS/new-warm$i" 2>&1 | tail -3
done | tee "$DEST/same_bits.txt"
if [ -f "$DEST/smoke.prof" ]; then
  "$PY" -c "import pstats,sys; p=pstats.Stats(sys.argv[1]); p.sort_stats('tottime').print_stats(30)" "$DEST/smoke.prof" \
    >"$DEST/prof-tottime.txt" 2>&1
  "$PY" -c "import pstats,sys; p=pstats.Stats(sys.argv[1]); p.sort_stats('cumtime').print_stats(60)" "$DEST/smoke.prof" \
    >"$DEST/prof-cum.txt" 2>&1
fi
mkdir -p "$DEST/runs"; for d in "$RUNS"/*/; do n=$(basename "$d"); mkdir -p "$DEST/runs/$n"
  cp "$d"/{metrics.jsonl,manifest.json,verdict.json} "$RUNS/$n.log" "$DEST/runs/$n/" 2>/dev/null; done
tar -czf "$DEST/runs.tgz" -C "$DEST" runs && rm -rf "$DEST/runs"
