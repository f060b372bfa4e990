#!/usr/bin/env bash
# OpenMP's wait policy and the CPU smoke run: one small op (a 30-row index_add_ into a 128x128 tensor, the MoE
# experts' combine in a decode step) under each policy, then 12-step qwen3_vl_30b smoke runs alone and two side by
# side (as two pytest-xdist workers run them). Usage: PY=.nox/tests/bin/python bash bench/omp_wait.sh
# Results: bench/results/omp-wait-epyc-2026-12-07/.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/hc} HARNESS_RUN_ZYGOTE=off  # plain processes: /usr/bin/time sees the run
"$PY" -c "import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())"
op() {
  env "$@" "$PY" - <<'PYEOF'
import time, torch
torch.set_num_threads(2); torch.use_deterministic_algorithms(True)
final, tok, src = torch.zeros(128, 128), torch.randperm(128)[:30].sort().values, torch.randn(30, 128)
final.index_add_(0, tok, src); t = time.perf_counter()
for _ in range(500):
    final.index_add_(0, tok, src)
print(f"index_add_ {(time.perf_counter() - t) / 500 * 1e6:.1f} us")
PYEOF
}
for policy in "X=default" OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000; do echo "$policy: $(op $policy)"; done
run() {  # NAME ENV...: one 12-step smoke run, its verdict and its wall/CPU
  local name=$1; shift; rm -rf "/tmp/omp-wait-$name"
  env "$@" /usr/bin/time -f "$name %e s wall %U user %S sys" "$PY" -m harness run qwen3_vl_30b --profile cpu \
    --steps 12 --no-report --runtime local --out "/tmp/omp-wait-$name" --quiet 2>&1 \
    | grep -o 'PASS.*equal\|FAIL.*\|throughput [0-9.k]* tok/s\|^[A-Za-z0-9_-]* [0-9.]* s wall.*'
}
run warm-start OMP_WAIT_POLICY=PASSIVE  # trains the warm start once (cached)
for rep in 1 2; do
  for policy in OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000; do run "solo-${policy%%=*}-$rep" "$policy"; done
  for policy in OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=1000 GOMP_SPINCOUNT=10000 X=default; do
    t0=$(date +%s.%N)
    run "pair-a-${policy%%=*}-$rep" "$policy" & run "pair-b-${policy%%=*}-$rep" "$policy" & wait
    echo "pair $policy: $(echo "$(date +%s.%N) - $t0" | bc) s"
  done
done
