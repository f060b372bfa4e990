#!/usr/bin/env bash
# The product on one H200, in one call: reference baselines for the gpu-1x-h200 profile (every recipe's
# smoke scale with 5 seeds run concurrently on the one GPU, qwen3_30b_a3b reduced with 2 seeds one after the
# other — two runs of 80 GB do not fit side by side), each baseline's throughput re-measured from a solo run,
# then the main command twice, lr x 100 (must FAIL), the bitwise resume check and the certification suite.
# One summary line per item in $DEST/summary.txt; run directories, logs and baselines under $DEST.
# Usage: DEST=$OUT bash bench/gpu_campaign.sh [baselines] [main] [resume] [certify]   (default: all)
set -uo pipefail
DEST=${DEST:-runs/gpu-campaign}
mkdir -p "$DEST"
H=(python3 -m harness)
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(baselines main resume certify)
export PYTHONUNBUFFERED=1 HARNESS_CACHE=${HARNESS_CACHE:-/tmp/harness-cache}
summary() { echo "$*" | tee -a "$DEST/summary.txt"; }
item() {  # name, timeout_s, command...: run it, log it, one summary line with its last verdict/result line
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$DEST/$name.log" 2>&1
  local rc=$?
  summary "$name rc=$rc wall_s=$((SECONDS - t0)) $(grep -E '^(PASS|FAIL|REFUSED|NO-BASELINE|wrote|VERIFIED|certif|ckpt|error)' \
    "$DEST/$name.log" | tail -1 | cut -c1-300)"
  return $rc
}
"${H[@]}" probe >"$DEST/probe.txt" 2>&1
for phase in "${phases[@]}"; do
  case $phase in
    baselines)
      for r in qwen3_vl_30b qwen3_30b_a3b qwen3_1_7b; do
        item "baseline-$r-smoke" 420 "${H[@]}" record-baseline "$r" --profile gpu-1x-h200 --scale smoke --seeds 5 \
          --jobs 5 --force --quiet --runs-dir "$DEST/baseline-runs/$r-smoke" &
      done
      wait
      item "baseline-qwen3_30b_a3b-reduced" 300 "${H[@]}" record-baseline qwen3_30b_a3b --profile gpu-1x-h200 \
        --scale reduced --seeds 2 --force --quiet --runs-dir "$DEST/baseline-runs/qwen3_30b_a3b-reduced"
      for spec in qwen3_vl_30b:smoke qwen3_30b_a3b:smoke qwen3_1_7b:smoke; do
        item "throughput-${spec/:/-}" 180 "${H[@]}" record-baseline "${spec%%:*}" --profile gpu-1x-h200 \
          --scale "${spec##*:}" --throughput-only --seeds 1 --steps 12 --force --quiet \
          --runs-dir "$DEST/baseline-runs/${spec/:/-}-solo"
      done
      mkdir -p "$DEST/baselines" && cp baselines/*/gpu-1x-h200-* "$DEST/baselines/" 2>/dev/null ;;
    main)
      item main-1 240 "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-1"
      item main-2 240 "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-2"
      item main-lr-x100 240 "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-lr-x100" \
        --set actor_rollout_ref.actor.optim.lr=0.1 ;;
    resume)
      item resume-reduced 300 "${H[@]}" ckpt-resume qwen3_30b_a3b --profile gpu-1x-h200 --scale reduced --steps 4 \
        --workdir "$DEST/resume" ;;
    certify)
      item certify 480 "${H[@]}" certify gpu-1x-h200 --out "$DEST/certificate" --quiet ;;
  esac
done
