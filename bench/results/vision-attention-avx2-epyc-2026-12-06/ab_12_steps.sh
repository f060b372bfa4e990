cd /work/main
export OMP_WAIT_POLICY=PASSIVE
for i in 1 2; do for side in base new; do
  root=$([ $side = base ] && echo /tmp/wt-base || echo /work/main)
  export HARNESS_CACHE=/tmp/hc-ab-$side-$i; rm -rf $HARNESS_CACHE /tmp/abrun-$side-$i
  S=$(date +%s.%N)
  (cd $root && PYTHONPATH=$root /work/main/.nox/tests/bin/python -m harness run qwen3_vl_30b --profile cpu --runtime local --steps 12 --out /tmp/abrun-$side-$i --quiet --no-report) > /tmp/meas/ab-$side-$i.log 2>&1
  E=$(python3 -c "import time;print(round(time.time()-$S,2))")
  S2=$(date +%s.%N)
  (cd $root && PYTHONPATH=$root /work/main/.nox/tests/bin/python -m harness run qwen3_vl_30b --profile cpu --runtime local --steps 12 --out /tmp/abrun-$side-$i-w --quiet --no-report) > /tmp/meas/ab-$side-$i-w.log 2>&1
  E2=$(python3 -c "import time;print(round(time.time()-$S2,2))")
  echo "$side $i cold $E warm $E2 $(tail -1 /tmp/meas/ab-$side-$i.log | cut -c1-120)"
done; done
