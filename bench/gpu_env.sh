# Sourced by the device scripts (bench/gpu_*.sh): the carried wheels (.whl) installed once into /tmp/site,
# PYTHONPATH, the harness cache, unbuffered output, and the commit the copy was made from (git metadata on the
# device can be stale: HARNESS_GIT_REVISION from COMMIT when the copy has one). Sets DEST and PY.
DEST=${DEST:-${OUT:-/tmp/bench-out}}
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1 GIT_CEILING_DIRECTORIES=$(dirname "$PWD")
PY=${PY:-python3}
if [ -d .whl ] && ! [ -e /tmp/site/.done ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done || { echo "install of .whl failed"; exit 2; }
fi
export PYTHONPATH=/tmp/site:$PWD
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/harness-cache}
if [ -f COMMIT ]; then export HARNESS_GIT_REVISION=$(cat COMMIT); fi
