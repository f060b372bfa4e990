#!/usr/bin/env bash
# Where the GPU smoke's wall time goes (issue: <= 30 s warm for qwen3_vl_30b's 40 steps on gpu-1x-h200).
# One device call, ~4 min: the smoke run cold (warm start trained and cached) then warm, each timed; a third warm
# run under cProfile ($DEST/smoke.prof, read with pstats); `harness --help` and `harness validate` timed, and
# `-X importtime` of `--help` ($DEST/importtime.txt). $DEST/smoke_wall.json holds the figures.
# Usage (device): DEST=$OUT bash bench/gpu_smoke_wall.sh      (CPU dry run: PROFILE=cpu RECIPE=qwen3_1_7b STEPS=2)
# PROFILED=0 leaves out the run under cProfile. RUN_ARGS adds flags to each `harness run` (on a device the baseline
# was not recorded on, `--tier statistical --candidates 1 --no-replay-probe` makes a free run, with its rollouts, as
# the baseline's own device does, instead of the replay tier's teacher-forced one).
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
RUNS=${RUNS:-/tmp/smoke-wall-runs}
PROFILE=${PROFILE:-gpu-1x-h200}
RECIPE=${RECIPE:-qwen3_vl_30b}
ARGS="${STEPS:+--steps $STEPS} ${RUN_ARGS:-}"  # flags of each harness run
rm -rf "$RUNS"; mkdir -p "$RUNS"
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-} PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-}"
"$PY" -c "import sys; print('dont_write_bytecode', sys.dont_write_bytecode)"
"$PY" -c "import flash_attn; print('flash_attn', flash_attn.__version__)" 2>&1 | tail -1
walls=()
for name in cold warm; do
  t0=$(date +%s.%N)
  timeout 400 "$PY" -m harness run "$RECIPE" --profile "$PROFILE" $ARGS --quiet --out "$RUNS/$name" \
    >"$DEST/smoke-$name.log" 2>&1
  rc=$?
  w=$(since "$t0")
  echo "$name rc=$rc wall=${w}s"; walls+=("\"$name\": {\"rc\": $rc, \"wall_s\": $w}")
done
names="cold warm"
if [ "${PROFILED:-1}" = 1 ]; then  # PROFILED=0: the two timed runs only (~1 min less on the device)
  timeout 400 "$PY" -m cProfile -o "$DEST/smoke.prof" -m harness run "$RECIPE" --profile "$PROFILE" $ARGS --quiet \
    --out "$RUNS/profiled" >"$DEST/smoke-profiled.log" 2>&1
  echo "profiled rc=$?"
  names="cold warm profiled"
fi
for name in $names; do  # each run's verdict, its throughput check and the machine's calibration
  "$PY" - "$RUNS/$name" <<'PYEOF' 2>&1 | tee -a "$DEST/verdicts.txt"
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
v, m = json.loads((d / "verdict.json").read_text()), json.loads((d / "manifest.json").read_text())
print(d.name, v["summary_line"][:100])
print("  ", *[c["detail"] for c in v["checks"] if c["group"] == "throughput"], "| calibration:", m.get("calibration"))
PYEOF
done
for cmd in "--help" "validate $RECIPE"; do
  t0=$(date +%s.%N)
  "$PY" -m harness $cmd >/dev/null 2>&1
  w=$(since "$t0")
  echo "harness $cmd: ${w}s"; walls+=("\"harness $cmd\": {\"wall_s\": $w}")
done
"$PY" -X importtime -m harness --help 2>"$DEST/importtime.txt" >/dev/null
( IFS=,; echo "{${walls[*]}, \"cpus\": $(nproc), \"device\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)\"}" ) \
  >"$DEST/smoke_wall.json"
cat "$DEST/smoke_wall.json"
