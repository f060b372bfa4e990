#!/usr/bin/env bash
# Does the CPU numerics pin give the same bits on this machine as on another? Run it on both and diff.
#   probe-<setting>.json  bench/isa_probe.py's per-op hashes under each oneMKL reproducibility setting, and unpinned
#   run-<setting>/        the qwen3_vl_30b smoke recipe on the CPU profile (free run; metrics + manifest kept)
# Settings: MKL_CBWR values (default "AVX2,STRICT COMPATIBLE"); runs go side by side, 2 threads each.
# Compare two machines' results with: python bench/compare_metrics.py A/run-X B/run-X ; diff the probes' "ops".
# Usage: bash bench/cpu_portability.sh OUTDIR [SETTING ...]
set -uo pipefail
out=${1:?usage: cpu_portability.sh OUTDIR [MKL_CBWR setting ...]}; shift
settings=("$@"); [ ${#settings[@]} -eq 0 ] && settings=("AVX2,STRICT" "COMPATIBLE")
mkdir -p "$out"
PY=${PYTHON:-python3}
tag() { echo "$1" | tr ',' '-' | tr 'A-Z' 'a-z'; }
HARNESS_CPU_ISA=native CUDA_VISIBLE_DEVICES= "$PY" bench/isa_probe.py >"$out/probe-native.json" 2>"$out/probe-native.err"
for s in "${settings[@]}"; do
  MKL_CBWR=$s CUDA_VISIBLE_DEVICES= "$PY" bench/isa_probe.py >"$out/probe-$(tag "$s").json" 2>"$out/probe-$(tag "$s").err"
done
for s in "${settings[@]}"; do
  t=$(tag "$s")
  ( MKL_CBWR=$s CUDA_VISIBLE_DEVICES= HARNESS_CACHE=/tmp/portability-cache-$t "$PY" -m harness run qwen3_vl_30b \
      --profile cpu --tier exact --no-report --quiet --out "$out/run-$t" >"$out/run-$t.log" 2>&1
    echo "rc=$?" >>"$out/run-$t.log"
    find "$out/run-$t" -type f ! -name 'metrics.jsonl' ! -name 'manifest.json' ! -name 'verdict*.json' -delete ) &
done
wait
grep -h -E '^(PASS|FAIL|rc=)' "$out"/run-*.log
