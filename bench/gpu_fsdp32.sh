#!/usr/bin/env bash
# One H200 rank wrapped in FSDP2 (`--runtime torchrun`, world 1: the rollout gathers once) against the same run
# unwrapped (`--runtime local`): the rollout's tokens and tokens/s, for the dense and the vision-MoE smoke recipes
# (one device call, ~4 min). Writes $DEST/fsdp32.json (per recipe: engine, gen seconds per step, new tokens per second, and
# whether every step's response tokens are equal).
# Usage (device): DEST=$OUT bash bench/gpu_fsdp32.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
RUNS=${RUNS:-/tmp/fsdp32-runs}
PROFILE=${PROFILE:-gpu-1x-h200}  # PROFILE=cpu RECIPES=qwen3_1_7b: a dry run of this script on a CPU machine
RECIPES=${RECIPES:-"qwen3_1_7b qwen3_vl_30b"}
for recipe in $RECIPES; do
  for rt in local torchrun; do
    t0=$SECONDS
    timeout 400 "$PY" -m harness run "$recipe" --profile "$PROFILE" --steps 6 --runtime "$rt" --stage train --quiet \
      --out "$RUNS/$recipe-$rt" >"$DEST/$recipe-$rt.log" 2>&1
    echo "$recipe $rt rc=$? $((SECONDS - t0)) s"
  done
done
"$PY" - "$RUNS" "$DEST/fsdp32.json" <<'PY'
import json, sys, pathlib
import numpy as np
runs, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
doc = {}
for recipe in sorted({p.name.rsplit("-", 1)[0] for p in runs.iterdir()}):
    row = {}
    for rt in ("local", "torchrun"):
        d = runs / f"{recipe}-{rt}"
        if not (d / "metrics.jsonl").is_file():
            row[rt] = {"missing": True}
            continue
        m = json.loads((d / "manifest.json").read_text())
        steps = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        steps = [s for s in steps if s.get("step", 0) >= 1]
        gen = [s["timing_s/gen"] for s in steps[1:]]  # step 1 warms up
        new = []
        for s in steps[1:]:
            z = np.load(d / "rollouts" / f"step-{s['step']:06d}.npz")
            new.append(int(z["response_mask"].sum()) / s["timing_s/gen"])
        row[rt] = {"device": m["machine"]["device_model"], "engine": m["model"]["decode_engine"], "notes": m["model"]["notes"],
                   "gen_s_median": float(np.median(gen)), "new_tok_per_s_median": float(np.median(new)),
                   "world": m["runtime"]["world_size"]}
    if all("missing" not in row[r] for r in row):
        same = []
        for k in range(1, 7):
            a = np.load(runs / f"{recipe}-local" / "rollouts" / f"step-{k:06d}.npz")
            b = np.load(runs / f"{recipe}-torchrun" / "rollouts" / f"step-{k:06d}.npz")
            same.append(bool(np.array_equal(a["response_ids"], b["response_ids"])
                             and np.array_equal(a["response_mask"], b["response_mask"])))
        row["tokens_equal_per_step"] = same
    doc[recipe] = row
out.write_text(json.dumps(doc, indent=1) + "\n")
print(json.dumps(doc, indent=1))
PY
