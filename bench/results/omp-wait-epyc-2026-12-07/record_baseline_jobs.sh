# record-baseline --jobs 2 on the CPU: "default" sets OMP_WAIT_POLICY empty (libgomp default, what every run had before;
# the product keeps a policy that is set), "passive" leaves it unset (the product then sets PASSIVE for the seeds).
cd "$(dirname "$0")/../../.." && export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/hc}
for mode in default passive default passive; do
  rm -rf /tmp/rb-$mode; S=$(date +%s.%N)
  if [ $mode = default ]; then export OMP_WAIT_POLICY=; else unset OMP_WAIT_POLICY; fi
  timeout 1200 .nox/tests/bin/python -m harness record-baseline qwen3_vl_30b --profile cpu --seeds 2 --jobs 2 --steps 12 --out /tmp/rb-$mode/cpu-smoke.json --runs-dir /tmp/rb-$mode/runs --quiet > /tmp/rb-$mode.log 2>&1
  echo "$mode rc=$? $(echo "$(date +%s.%N) - $S" | bc) s"
  python3 -c "
import json
for s in (42,43):
    rows=[json.loads(l) for l in open('/tmp/rb-$mode/runs/seed-%d/metrics.jsonl'%s)]
    print(s, [round(r['critic/score/mean'],6) for r in rows if 'critic/score/mean' in r][:4], sum(r.get('timing_s/step',0) for r in rows))
"
done
