#!/usr/bin/env bash
# Install everything and run the checks CI runs: ruff, mypy, the whole pytest suite (unit + simulator + e2e).
#
# pytest runs in DEPLOY_TEST_JOBS processes (pytest-xdist; default: one per 5.5 GB of memory, at most 5, so 4 on a
# 24 GiB machine; 0 = one process), each with its own
# simulated host on free loopback addresses (tests/sim_hosts.py; DEPLOY_SIM_FIRST=N pins them to N..), so a
# demo left running does not get in the way. Each test file runs whole in one process, in order (--dist loadfile;
# `loadgroup` split modules across workers, and a module's first test converges the hosts its later tests use): the
# end-to-end modules share one simulated host or fleet per module; the tests that only read a converged host share
# one per process (tests/e2e/conftest.py, converged_shared). The CLI runs in-process where the process is not the point (tests/e2e/inprocess.py). The run fails on any
# skipped test except "no GPU"
# (tests/skip_policy.py). It prints the 15 slowest tests. Extra arguments go to pytest. Before pytest it builds the
# container templates the tests use, once per machine and code version (tests/e2e/site_template.py), so that no
# test's timeout has to cover a cold build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
VENV=${DEPLOY_VENV:-$PWD/.venv}
export PATH="$VENV/bin:$PATH"
PY="$VENV/bin/python"
"$PY" -m ruff check orchestrator simulator tests
"$PY" -m mypy
"$PY" -m mypy tests/perf  # the perf scripts: no test imports them
"$PY" -m tests.e2e.site_template  # the stock and the site container templates, cached (cold: a few minutes)

# The tests' temporary files (every simulated host, its containers' root filesystems) go to a tmpfs of their own,
# mounted here and gone at the end: on this class of machine the disk costs ~1 ms of kernel time per file created,
# so unpacking one container (15k files) took 14 s of CPU on ext4 and 0.7 s in memory. The tests use ~5 GB at
# most. DEPLOY_TEST_TMP=DIR keeps them in DIR instead (to read a failed test's files afterwards).
if [ -z "${DEPLOY_TEST_TMP:-}" ] && [ "$(id -u)" = 0 ]; then
  tmp_dir=$(mktemp -d /var/tmp/deploy-tests.XXXXXX)
  mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  if mount -t tmpfs -o "size=$((mem_kb / 2))k,mode=1777" deploy-tests "$tmp_dir"; then
    trap 'umount -l "$tmp_dir" 2>/dev/null; rmdir "$tmp_dir" 2>/dev/null || true' EXIT
    DEPLOY_TEST_TMP=$tmp_dir
  else
    rmdir "$tmp_dir"
  fi
fi
if [ -n "${DEPLOY_TEST_TMP:-}" ]; then export TMPDIR=$DEPLOY_TEST_TMP; fi
# Each process's simulated hosts keep their containers' root filesystems in memory: about 3.6 GB at a process's
# peak since containers carry the C/C++ toolchain a real first start compiles with (520 MB a container, the site
# template it came from beside it). Five processes on a 24 GiB machine reached 22 GB of tmpfs and the OOM killer.
mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
jobs=$(( mem_kb / 5500000 )); [ "$jobs" -gt 5 ] && jobs=5; [ "$jobs" -lt 1 ] && jobs=1
"$PY" -m pytest -q -p no:cacheprovider -n "${DEPLOY_TEST_JOBS:-$jobs}" --dist loadfile \
  --no-loadscope-reorder --durations=15 "$@"
