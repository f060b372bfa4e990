export OMP_WAIT_POLICY=PASSIVE
for i in 1 2; do for side in base new; do
  root=$([ $side = base ] && echo /tmp/wt-base || echo /work/main)
  export HARNESS_CACHE=/tmp/hc-m-$side-$i; rm -rf $HARNESS_CACHE /tmp/mrun-$side-$i
  S=$(date +%s.%N)
  (cd $root && PYTHONPATH=$root /work/main/.nox/tests/bin/python -m harness run qwen3_vl_30b --profile cpu --runtime local --out /tmp/mrun-$side-$i --quiet --no-report) > /tmp/meas/m-$side-$i.log 2>&1
  E=$(python3 -c "import time;print(round(time.time()-$S,2))")
  echo "$side $i full40 cold $E $(tail -1 /tmp/meas/m-$side-$i.log | cut -c1-150)"
done; done
