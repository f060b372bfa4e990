#!/usr/bin/env bash
# Issue 36 on one H200, one device call per phase (each well under 10 minutes):
#   decode   bench/decode_check.py on W: the engines' agreement and speed, the fused sampler against the graph
#            engine's reference sampler, and both samplers' device time per call
#   w        bench/grpo_step.py's defaults (W), both sides in one run: the acceptance figures
#   wlong    bench/grpo_step.py --preset w-long, both sides in one run (ours on the project's transformers 5.24,
#            TRL on the image's 5.17, as in bench/README.md "Run it")
#   profile  bench/w_profile.py on W (grpo_step.py's defaults): decode and update, where the time goes
#   profile-long  the same on W-long (one warm step, no decode-batch sweep)
#   moe      bench/moe_routing.py: the fused MoE routing against transformers' grouped_mm experts (agreement, time)
#   smoke    bench/gpu_smoke_wall.sh (PROFILED=0): the qwen3_vl_30b GPU smoke cold then warm, timed, into $DEST/smoke
# REQUIRE=H200 runs nothing (exit 0, said in summary.txt) unless nvidia-smi names such a card: the acceptance runs
# that must be on the baseline's card cost only a machine's start when another card comes. $OUT returns at most 8
# files: with several phases, write to DEST=/tmp/r and tar it into $OUT, e.g.
#   REQUIRE=H200 DEST=/tmp/r bash bench/gpu_profile36.sh smoke w; tar czf $OUT/r.tgz -C /tmp/r .
# Run from a copy of the repository that holds the wheels in .whl/ (ours) and .whl-bench/ (TRL). With no git
# metadata in the copy, BENCH_COMMIT (or the file COMMIT beside .whl/) names the commit it was made from.
# Every log and result lands in $DEST (default $OUT, else /tmp/gpu36); $WLONG_ARGS adds flags to the w-long run.
# Usage: DEST=$OUT bash bench/gpu_profile36.sh wlong profile
set -uo pipefail
cd "$(dirname "$0")/.."
DEST=${DEST:-${OUT:-/tmp/gpu36}}
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1
[ -z "${BENCH_COMMIT:-}" ] && [ -f COMMIT ] && BENCH_COMMIT=$(cat COMMIT) && export BENCH_COMMIT
export GIT_CEILING_DIRECTORIES=$(dirname "$PWD")  # never read an enclosing checkout's git metadata
PY=${PY:-python3}
summary() { echo "$*" | tee -a "$DEST/summary.txt"; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu" in
  *"${REQUIRE:-}"*) ;;
  *) summary "REQUIRE=${REQUIRE}, but the card is ${gpu:-none}: nothing run"; exit 0 ;;
esac
if [ -d .whl ] && ! [ -e /tmp/site/.done ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done || { summary "install of .whl failed"; exit 2; }
fi
if [ -d .whl-bench ] && ! [ -e /tmp/trl/.done ]; then
  # TRL's side: its wheels plus the harness's own needs (pydantic, jsonschema, ...), but the image's transformers
  common=(); for w in .whl/*.whl; do case $(basename "$w") in transformers-*|tokenizers-*) ;; *) common+=("$w");; esac; done
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/trl .whl-bench/*.whl \
    "${common[@]}" && touch /tmp/trl/.done || { summary "install of .whl-bench failed"; exit 2; }
fi
OURS_PATH=${OURS_PATH:-/tmp/site:$PWD}
TRL_PATH=${TRL_PATH:-/tmp/trl:$PWD}
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv; nproc; } >"$DEST/probe.txt" 2>&1
for phase in "$@"; do
  t0=$SECONDS
  case $phase in
    decode)
      PYTHONPATH=$OURS_PATH timeout "${DECODE_TIMEOUT:-300}" "$PY" bench/decode_check.py --out "$DEST" \
        >"$DEST/decode.log" 2>&1
      rc=$?
      tail -12 "$DEST/decode.log" ;;
    w)
      BENCH_PYTHONPATH_OURS=$OURS_PATH BENCH_PYTHONPATH_TRL=$TRL_PATH timeout "${W_TIMEOUT:-420}" "$PY" \
        bench/grpo_step.py --out "$DEST" ${W_ARGS:-} >"$DEST/w.log" 2>&1
      rc=$?
      grep -v "Loading weights\|Writing model\|^{'loss'\|warnings.warn\|FutureWarning" "$DEST/w.log" | tail -25 ;;
    wlong)
      BENCH_PYTHONPATH_OURS=$OURS_PATH BENCH_PYTHONPATH_TRL=$TRL_PATH timeout "${WLONG_TIMEOUT:-570}" "$PY" \
        bench/grpo_step.py --preset w-long --out "$DEST" ${WLONG_ARGS:-} >"$DEST/wlong.log" 2>&1
      rc=$?
      grep -v "Loading weights\|Writing model\|^{'loss'\|warnings.warn\|FutureWarning" "$DEST/wlong.log" | tail -25 ;;
    profile)
      PYTHONPATH=$OURS_PATH timeout "${PROFILE_TIMEOUT:-420}" "$PY" bench/w_profile.py --out "$DEST" \
        ${PROFILE_ARGS:-} >"$DEST/profile.log" 2>&1
      rc=$?
      tail -45 "$DEST/profile.log" ;;
    profile-long)  # W-long's decode and update (one warm step: its first step compiles and captures)
      PYTHONPATH=$OURS_PATH timeout "${PROFILE_LONG_TIMEOUT:-300}" "$PY" bench/w_profile.py --preset w-long \
        --warm-steps 1 --decode-batches "" --out "$DEST" ${PROFILE_ARGS:-} >"$DEST/profile-w-long.log" 2>&1
      rc=$?
      tail -30 "$DEST/profile-w-long.log" ;;
    moe)
      PYTHONPATH=$OURS_PATH timeout "${MOE_TIMEOUT:-240}" "$PY" bench/moe_routing.py --out "$DEST" \
        >"$DEST/moe.log" 2>&1
      rc=$?
      tail -4 "$DEST/moe.log" ;;
    smoke)
      PROFILED=0 DEST=$DEST/smoke timeout "${SMOKE_TIMEOUT:-240}" bash bench/gpu_smoke_wall.sh >"$DEST/smoke.log" 2>&1
      rc=$?
      tail -9 "$DEST/smoke.log" ;;
    *) echo "unknown phase $phase" >&2; rc=2 ;;
  esac
  summary "$phase rc=$rc wall_s=$((SECONDS - t0))"
done
