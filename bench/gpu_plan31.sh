#!/usr/bin/env bash
# `harness plan` against measured per-phase peaks on one H200 (one device call, ~3 min): the reduced MoE recipe
# (3 steps) and the qwen3_1_7b smoke (4 steps), one run each (no candidates, no replay probe), under
# bench/phase_memory.py (per-phase peaks; step 3's resident blocks and its update's blocks at their peak, by the
# frame that allocated them), each run writing the plan.json that `harness run` makes on an accelerator profile.
#   (run directories under $RUNS; plan.json, logs and the per-phase records under $DEST)
# Usage (device): DEST=$OUT bash bench/gpu_plan31.sh
set -uo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-${OUT:-/tmp/plan31}}
source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >"$DEST/probe.txt" 2>&1
RUNS=${RUNS:-/tmp/plan31-runs}  # the runs' own files stay on the device; their plan.json comes back
run() {  # NAME ACCOUNT_STEP, then the harness command line
  local name=$1 acct=$2; shift 2
  local t0=$SECONDS
  timeout "${RUN_TIMEOUT:-200}" "$PY" bench/phase_memory.py --out "$DEST" --name "$name" --account-step "$acct" \
    -- "$@" --out "$RUNS/$name" >"$DEST/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s: $(grep -v 'warn' "$DEST/$name.log" | tail -2 | head -1 | cut -c1-150)"
  cp "$RUNS/$name/plan.json" "$DEST/$name.plan.json" 2>/dev/null
}
# one run, no candidates or replay probe (they would train in this process after it)
run reduced 3 run qwen3_30b_a3b --profile gpu-1x-h200 --scale reduced --steps 3 --runtime local --no-report \
  --candidates 1 --no-replay-probe
run qwen3_1_7b-smoke 3 run qwen3_1_7b --profile gpu-1x-h200 --steps 4 --runtime local --no-report \
  --candidates 1 --no-replay-probe
"$PY" - "$DEST" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
for f in sorted(d.glob("*.phase-memory.json")):
    doc = json.loads(f.read_text())
    name = f.name.split(".")[0]
    for r in doc["records"]:
        print(name, {k: (round(v / 1e9, 3) if isinstance(v, int) and v > 1e6 else v) for k, v in r.items() if k != "t"})
    plan = d / f"{name}.plan.json"
    if plan.is_file():
        planned = json.loads(plan.read_text())
        print(name, "planned", {k: round(v["peak_bytes"] / 1e9, 2) for k, v in planned["phases"].items()})
PY
