#!/usr/bin/env bash
# The product on one H200, in phases that each fit one device call (<= 10 min):
#   baselines  reference baselines of every recipe's smoke scale (5 seeds each, the 15 runs concurrently on the
#              one GPU), then each one's throughput re-measured from a solo run
#   main       the main command twice (exact tier against the baseline just recorded or committed)
#   fault      the main recipe with lr x 100 (must FAIL)
#   reduced    qwen3_30b_a3b at reduced scale (real width, 4 layers): its baseline (2 seeds, one after the
#              other: two runs of ~80 GB do not fit side by side) and the bitwise resume check
#   resume     the bitwise resume check alone (the reduced baseline already recorded)
#   replay     the committed CPU baseline replayed on the GPU, fp32 and bf16
#   certify    the gpu-1x-h200 certification suite, signed with a key made on the machine (only the public
#              half is packed, inside the certificate), then verified there by the keyid keygen printed
# One summary line per item in $DEST/summary.txt. Items that would start after $DEADLINE (seconds since the
# script started) are skipped and say so. With $PACK set, everything small (baselines, manifests, metrics,
# verdicts, logs, the certificate) is packed into $PACK/<phases>.tgz at the end — the device returns few files.
# Usage: DEST=/tmp/campaign PACK=$OUT DEADLINE=540 bash bench/gpu_campaign.sh baselines main
set -uo pipefail
DEST=${DEST:-runs/gpu-campaign}
DEADLINE=${DEADLINE:-100000}
if [ -e "$DEST/summary.txt" ]; then  # a warm device machine keeps /tmp: never mix two campaigns' runs
  echo "error: $DEST holds an earlier campaign (fix: choose another DEST)" >&2; exit 2
fi
mkdir -p "$DEST"
H=(python3 -m harness)
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(baselines main fault reduced certify)
export PYTHONUNBUFFERED=1 HARNESS_CACHE=${HARNESS_CACHE:-/tmp/harness-cache}
summary() { echo "$*" | tee -a "$DEST/summary.txt"; }
item() {  # name, timeout_s, command...: run it, log it, one summary line with its last verdict/result line
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -le 30 ]; then summary "$name skipped: the deadline is reached"; return 124; fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS
  timeout "$limit" "$@" >"$DEST/$name.log" 2>&1
  local rc=$?
  summary "$name rc=$rc wall_s=$((SECONDS - t0)) $(grep -E '^(PASS|FAIL|REFUSED|NO-BASELINE|wrote|VERIFIED|certif|ckpt|error|harness:)' \
    "$DEST/$name.log" | tail -1 | cut -c1-400)"
  return $rc
}
pack() {
  [ -n "${PACK:-}" ] || return 0
  local made=(); for f in baselines/*/gpu-1x-h200-*; do [ -e "$f" ] && made+=("$f"); done
  tar czf "$PACK/$(IFS=-; echo "${phases[*]}").tgz" --exclude=rollouts --exclude=checkpoints --exclude='*.png' \
    --exclude='*.pt' --exclude='*.safetensors' --exclude=signing-key.pem -C "$DEST" . -C "$PWD" "${made[@]}"
}
trap pack EXIT
"${H[@]}" probe >"$DEST/probe.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$DEST/probe.txt" 2>&1
for phase in "${phases[@]}"; do
  case $phase in
    baselines)  # RECIPES: which (default all three); FAULT_BESIDE=1: the lr x 100 run of the main recipe trains
                # beside the recording and is judged once its baseline exists (saves a call's minute)
      if [ -n "${FAULT_BESIDE:-}" ]; then
        "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-lr-x100" --quiet \
          --set actor_rollout_ref.actor.optim.lr=0.1 >"$DEST/main-lr-x100.log" 2>&1 &
      fi
      for r in ${RECIPES:-qwen3_vl_30b qwen3_30b_a3b qwen3_1_7b}; do
        item "baseline-$r-smoke" 360 "${H[@]}" record-baseline "$r" --profile gpu-1x-h200 --scale smoke --seeds 5 \
          --jobs 5 --force --quiet --runs-dir "$DEST/baseline-runs/$r-smoke" &
      done
      wait
      for r in ${RECIPES:-qwen3_vl_30b qwen3_30b_a3b qwen3_1_7b}; do
        item "throughput-$r-smoke" 120 "${H[@]}" record-baseline "$r" --profile gpu-1x-h200 --scale smoke \
          --throughput-only --seeds 1 --steps 12 --force --quiet --runs-dir "$DEST/baseline-runs/$r-smoke-solo"
      done
      [ -n "${FAULT_BESIDE:-}" ] && item main-lr-x100-judged 60 "${H[@]}" compare "$DEST/main-lr-x100" --no-report ;;
    main)
      item main-1 180 "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-1"
      item main-2 180 "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-2" ;;
    fault)
      item main-lr-x100 180 "${H[@]}" run qwen3_vl_30b --runtime local --out "$DEST/main-lr-x100" \
        --set actor_rollout_ref.actor.optim.lr=0.1 ;;
    reduced)
      item baseline-qwen3_30b_a3b-reduced 300 "${H[@]}" record-baseline qwen3_30b_a3b --profile gpu-1x-h200 \
        --scale reduced --seeds 2 --force --quiet --runs-dir "$DEST/baseline-runs/qwen3_30b_a3b-reduced" ;&
    resume)  # the bitwise resume check (alone: the reduced baseline is already recorded)
      item resume-reduced 300 "${H[@]}" ckpt-resume qwen3_30b_a3b --profile gpu-1x-h200 --scale reduced --steps 4 \
        --workdir "$DEST/resume" ;;
    replay)  # the committed CPU baseline replayed on the GPU, fp32 and bf16 (each with its own tolerance)
      for dtype in float32 bfloat16; do
        item "replay-cpu-baseline-$dtype" 150 "${H[@]}" run qwen3_vl_30b --profile gpu-1x-h200 --runtime local \
          --tier replay --baseline baselines/qwen3_vl_30b/cpu-smoke.json --set model.dtype=$dtype \
          --out "$DEST/replay-cpu-baseline-$dtype"
      done ;;
    certify)  # a key made here for this certificate: the private half never leaves the machine (not packed);
              # certify writes its public half into the certificate; the keyid (summary) is what readers trust
      "${H[@]}" keygen --out "$DEST/keys" >"$DEST/keygen.log" 2>&1
      keyid=$(awk '/^keyid:/ {print $2}' "$DEST/keygen.log")
      summary "keygen keyid=$keyid"
      item certify 540 "${H[@]}" certify gpu-1x-h200 --key "$DEST/keys/signing-key.pem" --out "$DEST/certificate" \
        --quiet
      item verify-certificate 120 "${H[@]}" verify-certificate "$DEST/certificate/certificate.json" --keyid "$keyid" ;;
  esac
done
