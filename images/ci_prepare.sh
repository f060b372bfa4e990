#!/usr/bin/env bash
# Prepare a Debian host (as root) for the container tests, idempotently:
#   1. install docker.io and debootstrap from Debian's archive (skipped when present),
#   2. start dockerd in the background unless a daemon already answers,
#   3. build harness-cpu (offline once its wheelhouse and base exist; cached when unchanged).
# Usage: PYTHON=/path/to/venv/bin/python bash images/ci_prepare.sh
# Env: PYTHON (default python3), DOCKERD_WAIT (seconds, default 60),
#      DOCKERD_LOG (default /var/log/harness-dockerd.log).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
python="${PYTHON:-python3}"
wait_s="${DOCKERD_WAIT:-60}"
log="${DOCKERD_LOG:-/var/log/harness-dockerd.log}"
t0=$(date +%s)

stamp() { echo "ci_prepare: [$(( $(date +%s) - t0 ))s] $*"; }

if [ "$(id -u)" != 0 ]; then
  echo "ci_prepare: must run as root (apt-get, dockerd, debootstrap)" >&2
  exit 2
fi

if command -v dockerd >/dev/null && command -v debootstrap >/dev/null; then
  stamp "docker.io and debootstrap already installed"
else
  stamp "installing docker.io and debootstrap"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
fi

daemon_up() {
  if command -v docker >/dev/null; then
    docker info >/dev/null 2>&1
  else
    "$python" -c 'import docker; docker.from_env(timeout=5).ping()' >/dev/null 2>&1
  fi
}

alive() {  # a running (not zombie) process with this pid
  [ -r "/proc/$1/stat" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]
}

wait_gone() {  # wait up to 15 s for the process named in pid file $1 to end; then drop the file
  local pid
  [ -f "$1" ] || return 0
  pid="$(cat "$1" 2>/dev/null || true)"
  for _ in $(seq 15); do
    [ -n "$pid" ] && alive "$pid" || break
    sleep 1
  done
  if [ -z "$pid" ] || ! alive "$pid"; then
    rm -f "$1"  # stale: dockerd refuses to start while it exists
  fi
}

start_dockerd() {  # one attempt: 0 once the daemon answers, 1 if it exited or timed out
  local pid
  wait_gone /var/run/docker.pid
  wait_gone /var/run/docker/containerd/containerd.pid  # a stopped daemon's containerd may linger
  stamp "starting dockerd (log: $log)"
  mkdir -p "$(dirname "$log")"
  nohup setsid dockerd >>"$log" 2>&1 </dev/null &
  pid=$!
  for _ in $(seq "$wait_s"); do
    daemon_up && return 0
    alive "$pid" || return 1
    sleep 1
  done
  return 1
}

if daemon_up; then
  stamp "a Docker daemon already answers"
else
  if ! start_dockerd; then
    stamp "dockerd did not come up; retrying once"
    sleep 3
    start_dockerd || {
      echo "ci_prepare: dockerd did not answer within ${wait_s}s; last lines of $log:" >&2
      grep -v 'Layer sha256' "$log" | tail -n 15 >&2 || true
      exit 1
    }
  fi
  stamp "dockerd is up"
fi

stamp "building the CPU image"
cd "$repo"
"$python" -m harness build-image cpu
stamp "done"
