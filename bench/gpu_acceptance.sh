#!/usr/bin/env bash
# GPU acceptance runs: the smoke recipes and the reduced-depth full-width qwen3_30b_a3b in bf16 on
# one H200, and (when 2 GPUs are present) the same with 2 ranks on NCCL + FSDP2, plus the 1-GPU vs
# 2-GPU metric difference. Every run directory lands under $DEST; a log per run beside it.
# Usage: DEST=runs/gpu bash bench/gpu_acceptance.sh [phase ...]   phases: smoke reduced ddp (default: all)
set -uo pipefail
DEST=${DEST:-runs/gpu}
mkdir -p "$DEST"
H=(python3 -m harness)
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(smoke reduced ddp)
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
run() {  # name, args...
  local name=$1; shift
  local t0=$SECONDS
  "${H[@]}" run "$@" --out "$DEST/$name" --quiet >"$DEST/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall_s=$((SECONDS - t0))" | tee -a "$DEST/summary.txt"
}
"${H[@]}" probe > "$DEST/probe.txt" 2>&1
for phase in "${phases[@]}"; do
  case $phase in
    smoke)
      for r in qwen3_vl_30b qwen3_30b_a3b qwen3_1_7b; do
        run "$r-1gpu-smoke" "$r" --profile gpu-1x-h200 --scale smoke --runtime local
      done ;;
    reduced)
      run "qwen3_30b_a3b-1gpu-reduced" qwen3_30b_a3b --profile gpu-1x-h200 --scale reduced --runtime local ;;
    ddp)
      if [ "$gpus" -ge 2 ]; then
        run "qwen3_vl_30b-2gpu-smoke" qwen3_vl_30b --profile gpu-2x-h200 --scale smoke --runtime torchrun
        run "qwen3_30b_a3b-2gpu-reduced" qwen3_30b_a3b --profile gpu-2x-h200 --scale reduced --runtime torchrun
      else
        echo "ddp skipped: $gpus GPU(s)" | tee -a "$DEST/summary.txt"
      fi ;;
  esac
done
