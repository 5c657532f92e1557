#!/usr/bin/env bash
# `.ci/run` from empty caches, timed: what a CI machine without a restored cache runs.
#
#   scripts/ci_cold.sh                    # a clean clone of HEAD, every cache empty, CI=true bash .ci/run
#   scripts/ci_cold.sh --env VERSION      # only one sglang release environment, built from empty caches
#
# Everything goes into one new folder under $TMPDIR (removed at the end, also on failure or Ctrl-C):
# a clone of HEAD (its .venv is built from scratch by make), its temp dir, and a cache folder that stands for the user's
# ~/.cache: WB_UPSTREAM_CACHE (sglang wheels, sources, release environments and uv's package store),
# XDG_CACHE_HOME, PIP_CACHE_DIR, UV_CACHE_DIR, WB_JOB_VENVS (tests/ci/test_workflow_jobs.py's venvs),
# TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR. Only the package indexes are used as they are (pip's
# configuration: its index, extra indexes and find-links, e.g. a local torch wheel).
# It prints the wall time of each phase (.ci/run prints its own phases), the total, and the peak disk
# of the cache folder and of the whole folder (sampled every 10 s with du, hard links counted once).
# Exit status: .ci/run's (or the environment build's); 2 on a usage error or a working tree with
# uncommitted changes to tracked files (the clone takes HEAD, so they would not be measured).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ONLY_ENV=
case "${1:-}" in
  "") ;;
  --env)
    ONLY_ENV=${2:-}
    [ -n "$ONLY_ENV" ] || { echo "scripts/ci_cold.sh: --env needs a release, e.g. --env 0.5.14" >&2; exit 2; }
    [ $# -eq 2 ] || { echo "scripts/ci_cold.sh: unexpected arguments after --env $ONLY_ENV: ${*:3}" >&2; exit 2; }
    ;;
  *)
    echo "scripts/ci_cold.sh: unknown argument '$1'; valid: none (the whole .ci/run) or --env VERSION" >&2
    exit 2
    ;;
esac
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ]; then
  echo "scripts/ci_cold.sh: $ROOT has uncommitted changes; the clone would not have them: commit first" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wb-ci-cold.XXXXXX")
SAMPLER=
# shellcheck disable=SC2329  # called by the EXIT trap
cleanup() {
  if [ -n "$SAMPLER" ]; then kill "$SAMPLER" 2>/dev/null || true; wait "$SAMPLER" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
CACHE=$WORK/cache
mkdir -p "$CACHE" "$WORK/tmp"
export WB_UPSTREAM_CACHE=$CACHE/eagle-workbench/upstream \
  WB_JOB_VENVS=$CACHE/eagle-workbench/job-venvs \
  XDG_CACHE_HOME=$CACHE \
  PIP_CACHE_DIR=$CACHE/pip \
  UV_CACHE_DIR=$CACHE/uv \
  TRITON_CACHE_DIR=$CACHE/triton \
  TORCHINDUCTOR_CACHE_DIR=$CACHE/torchinductor \
  TMPDIR=$WORK/tmp

# peak disk: du of the cache folder and of the whole folder, every 10 s, the largest kept in a file
( peak_c=0 peak_w=0
  while true; do
    c=$(du -sm "$CACHE" 2>/dev/null | cut -f1) w=$(du -sm "$WORK" 2>/dev/null | cut -f1)
    [ "${c:-0}" -gt "$peak_c" ] && peak_c=$c
    [ "${w:-0}" -gt "$peak_w" ] && peak_w=$w
    echo "$peak_c $peak_w" > "$WORK/peak.tmp" && mv "$WORK/peak.tmp" "$WORK/peak"
    sleep 10
  done ) &
SAMPLER=$!

HEAD_SHA=$(git -C "$ROOT" rev-parse HEAD)
git clone --quiet --no-hardlinks --no-checkout "$ROOT" "$WORK/clone"
cd "$WORK/clone"
git checkout --quiet "$HEAD_SHA"
echo "ci_cold: clone of $(git rev-parse --short HEAD) in $WORK/clone; caches in $CACHE (load $(cut -d' ' -f1-3 /proc/loadavg))"
start=$SECONDS
rc=0
if [ -n "$ONLY_ENV" ]; then
  t=$SECONDS
  make venv >/dev/null || rc=$?
  echo "ci_cold: phase make venv: $((SECONDS - t)) s (rc $rc)"
  if [ "$rc" -eq 0 ]; then
    t=$SECONDS
    .venv/bin/python -c "import sys
from workbench.upstream.context import UpstreamContext
from workbench.upstream.sources.envs import ensure_env
env = ensure_env(UpstreamContext(), sys.argv[1])
print(f'ci_cold: sglang {env.version}: environment {env.group}, built in {env.built_in_s} s')" "$ONLY_ENV" || rc=$?
    echo "ci_cold: phase release environment $ONLY_ENV: $((SECONDS - t)) s (rc $rc)"
  fi
else
  CI=true bash .ci/run || rc=$?
fi
echo "ci_cold: total $((SECONDS - start)) s (rc $rc; load $(cut -d' ' -f1-3 /proc/loadavg))"
sleep 1
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=
c=$(du -sm "$CACHE" | cut -f1) w=$(du -sm "$WORK" | cut -f1)
read -r peak_c peak_w < "$WORK/peak" || true
echo "ci_cold: disk at the end: caches $c MB, caches + clone $w MB; peak (10 s samples): caches $((peak_c > c ? peak_c : c)) MB, caches + clone $((peak_w > w ? peak_w : w)) MB"
du -sm "$CACHE"/* "$CACHE"/eagle-workbench/upstream/* 2>/dev/null | sort -rn | head -12 | sed 's|^|ci_cold:   |'
exit "$rc"
