# Sourced by the device scripts (bench/gpu_*.sh): the carried wheels (.whl) installed once into /tmp/site,
# PYTHONPATH, the harness cache, unbuffered output, and the commit the copy was made from (git metadata on the
# device can be stale: HARNESS_GIT_REVISION from COMMIT when the copy has one). Sets DEST and PY, and defines
# `since T0` (seconds since a `date +%s.%N`) for the scripts that time commands.
# The wheels are byte-compiled at install, as a plain `pip install` does, and so is the copied harness tree: a
# process then reads bytecode instead of compiling source (an installed product's state; BYTECODE=0 skips it).
DEST=${DEST:-${OUT:-/tmp/bench-out}}
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1 GIT_CEILING_DIRECTORIES=$(dirname "$PWD")
PY=${PY:-python3}
if [ -d .whl ] && ! [ -e /tmp/site/.done ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.done || { echo "install of .whl failed"; exit 2; }
fi
if [ "${BYTECODE:-1}" = 1 ]; then
  "$PY" -m compileall -q -j 0 harness >/dev/null || echo "compileall of harness/ failed (source is compiled per process)"
  if [ "${PYTHONDONTWRITEBYTECODE:-}" = 1 ]; then
    # The device image forbids writing bytecode and its own packages (torch, ...) ship none: every process compiled
    # ~2,000 modules (6.4 s of the GPU smoke's 40.5 s under cProfile, 2026-12-04). An installed product reads
    # bytecode, so compile everything once into a cache directory of its own, which Python then reads.
    export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pycache}
    if ! [ -e "$PYTHONPYCACHEPREFIX/.done" ]; then
      purelib=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      "$PY" -m compileall -q -j 0 "$purelib" /tmp/site "$PWD/harness" >/dev/null 2>&1
      mkdir -p "$PYTHONPYCACHEPREFIX" && touch "$PYTHONPYCACHEPREFIX/.done"
    fi
  fi
fi
export PYTHONPATH=/tmp/site:$PWD
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/harness-cache}
if [ -f COMMIT ]; then export HARNESS_GIT_REVISION=$(cat COMMIT); fi

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}'; }  # seconds since a `date +%s.%N`
