#!/usr/bin/env bash
# Verdicts off the home machine, measured on a lent GPU machine in one call:
#   probe    bench/isa_probe.py pinned and unpinned: which CPU ops give the same bits as on another machine;
#   speed    the qwen3_vl_30b CPU smoke run, 12 steps, pinned then unpinned (the pin's speed cost);
#   isa      the qwen3_vl_30b CPU smoke run pinned (HARNESS_CPU_ISA default) and unpinned (native) on this
#            machine's CPU, judged against the committed CPU baseline as `harness run` chooses (another ISA
#            class or software: replay);
#   replay   the committed CPU baseline replayed on the GPU, fp32 and bf16 (--tier replay);
#   power    false alarms and fault detection (bench/verdict_power.py) on this machine's CPU cores.
# Usage: DEST=$OUT bash bench/cross_machine.sh [probe] [speed] [isa] [replay] [power]   (default: the last three)
set -uo pipefail
DEST=${DEST:-runs/cross}
mkdir -p "$DEST"
H=(python3 -m harness)
phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(isa replay power)
export PYTHONUNBUFFERED=1 HARNESS_CACHE=${HARNESS_CACHE:-/tmp/harness-cache}
summary() { echo "$*" | tee -a "$DEST/summary.txt"; }
summary "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) | avx512f: $(grep -c -m1 avx512f /proc/cpuinfo)"
summary "torch: $(python3 -c 'import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())')"
for phase in "${phases[@]}"; do
  case $phase in
    probe)
      CUDA_VISIBLE_DEVICES="" python3 bench/isa_probe.py >"$DEST/probe-pinned.json" 2>"$DEST/probe.log"
      CUDA_VISIBLE_DEVICES="" HARNESS_CPU_ISA=native python3 bench/isa_probe.py >"$DEST/probe-native.json" 2>>"$DEST/probe.log"
      summary "probe rc=$? $(python3 -c 'import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); print("pinned vs native differ on:", [k for k in a["ops"] if a["ops"][k]!=b["ops"][k]])' "$DEST/probe-pinned.json" "$DEST/probe-native.json")" ;;
    speed)
      for isa in avx2 native avx2 native; do
        t0=$SECONDS
        CUDA_VISIBLE_DEVICES="" HARNESS_CPU_ISA=$isa "${H[@]}" run qwen3_vl_30b --profile cpu --runtime local --steps 12 \
          --tier statistical --out "$DEST/speed-$isa-$t0" --quiet >"$DEST/speed-$isa-$t0.log" 2>&1
        summary "speed $isa wall_s=$((SECONDS - t0)) p90 tok/s $(python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; v=sorted(x["perf/throughput"] for x in r if x["step"]>2); print(round(v[int(0.9*(len(v)-1))]))' "$DEST/speed-$isa-$t0/metrics.jsonl")"
      done ;;
    isa)
      for mode in pinned native; do
        t0=$SECONDS
        if [ $mode = native ]; then isa=native; else isa=avx2; fi
        CUDA_VISIBLE_DEVICES="" HARNESS_CPU_ISA=$isa "${H[@]}" run qwen3_vl_30b --profile cpu --runtime local \
          --out "$DEST/isa-$mode" --quiet >"$DEST/isa-$mode.log" 2>&1
        summary "isa $mode rc=$? wall_s=$((SECONDS - t0)) $(tail -1 "$DEST/isa-$mode.log" | cut -c1-200)"
      done ;;
    replay)
      for dtype in float32 bfloat16; do
        t0=$SECONDS
        "${H[@]}" run qwen3_vl_30b --profile gpu-1x-h200 --runtime local --tier replay \
          --baseline baselines/qwen3_vl_30b/cpu-smoke.json --set model.dtype=$dtype \
          --out "$DEST/replay-gpu-$dtype" >"$DEST/replay-gpu-$dtype.log" 2>&1
        summary "replay gpu $dtype rc=$? wall_s=$((SECONDS - t0)) $(grep -E '^(PASS|FAIL|REFUSED)' "$DEST/replay-gpu-$dtype.log" | cut -c1-400)"
      done ;;
    power)
      t0=$SECONDS
      CUDA_VISIBLE_DEVICES="" python3 bench/verdict_power.py qwen3_vl_30b --seeds 20 --first-seed 1000 --replay \
        --jobs "${JOBS:-7}" --out "$DEST/power" >"$DEST/power.log" 2>&1
      summary "power rc=$? wall_s=$((SECONDS - t0)) $(tail -1 "$DEST/power.log")" ;;
  esac
done
