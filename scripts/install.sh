#!/usr/bin/env bash
# Install what deploy and its simulated host need on a fresh Debian 12 machine (run as root).
#
# Python packages go into a virtual environment ($DEPLOY_VENV, default .venv/ in the repository): a stock
# Debian 12 has no pip for its python3 and refuses system-wide `pip install` (PEP 668, "externally managed").
# The venv is made from $PYTHON if set, else `python3` when it is >= 3.11 and can make venvs, else Debian's
# /usr/bin/python3 (3.11 on Debian 12, with apt's python3-venv). pip uses this machine's own configuration
# (/etc/pip.conf, ~/.config/pip/pip.conf, PIP_* variables). Idempotent: a second run only checks.
# Prints nothing but errors and one closing line; scripts/demo.sh and scripts/test.sh call it first.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (apt packages; the simulator needs namespaces and sshd)" >&2
  exit 2
fi
VENV=${DEPLOY_VENV:-$PWD/.venv}

# A python that can make the venv: >= 3.11 with the venv module and ensurepip (Debian ships both in python3-venv).
usable_python() {
  command -v "$1" >/dev/null 2>&1 &&
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

need_apt=()
for pair in sshd:openssh-server ssh:openssh-client ip:iproute2 flock:util-linux unshare:util-linux \
  nsenter:util-linux curl:curl pgrep:procps systemd-analyze:systemd \
  lxc-start:lxc debootstrap:debootstrap nft:nftables zstd:zstd dnsmasq:dnsmasq-base promtool:prometheus \
  prometheus-node-exporter:prometheus-node-exporter patch:patch chromium:chromium; do
  bin=${pair%%:*} pkg=${pair#*:}
  if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ]; then need_apt+=("$pkg"); fi
done
[ -e /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
# chromium: the tests open every HTML report the tool writes in a real headless browser (tests/browser.py: rendered,
# screenshot taken, no script error); its fontconfig dependency brings a font, so text renders without recommends.
# patch: the unit tests run the stack-patch script (orchestrator/stacks/patches.py) with GNU patch, as a container does.
# prometheus brings promtool and the prometheus binary: the tests check the shipped alert rules, the metrics and
# a scrape config with them, and tests run a real Prometheus on loopback (docs/monitoring.md); the end-to-end one
# also runs a real node_exporter (textfile collector only) over a simulated host's textfile directory.
# The simulator's container configs include lxc's distribution configs (debian.common.conf, nesting.conf,
# debian.userns.conf): they come from lxc-templates, a recommendation of lxc that --no-install-recommends skips.
[ -e /usr/share/lxc/config/debian.common.conf ] || need_apt+=(lxc-templates)
# The team state store's tests run a real PostgreSQL server on loopback in a temporary directory (tests/pg_server.py):
# only the server binaries are needed. No system cluster: postgresql-common reads createcluster.d before it would
# create and start one on install.
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/deploy-no-main-cluster.conf
  need_apt+=(postgresql)
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if usable_python python3; then PY=python3; else PY=/usr/bin/python3; fi
fi
if [ ! -x "$VENV/bin/python" ] && ! usable_python "$PY"; then
  if [ "$PY" = /usr/bin/python3 ]; then
    need_apt+=(python3 python3-venv)
  else
    echo "install.sh: $PY is not a Python >= 3.11 with the venv module; unset PYTHON or point it at one" >&2
    exit 2
  fi
fi

if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
# The distribution was called "deploy" before it became pve-sglang-deploy: drop that install from an older venv,
# so that one editable install owns the `deploy` script, and its build metadata from the checkout (-I: the check
# must not find that metadata through the current directory).
if "$VENV/bin/python" -I -c 'import importlib.metadata as m; m.distribution("deploy")' 2>/dev/null; then
  "$VENV/bin/python" -I -m pip uninstall --quiet --yes deploy
fi
rm -rf deploy.egg-info
# Editable: the venv runs this checkout, so an edit needs no reinstall. The extra brings the simulator's
# dependencies and the test tools (pytest, pytest-xdist, ruff, mypy; setuptools and wheel for tests/dist).
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
echo "install.sh: deploy $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pve-sglang-deploy"))') in $VENV (python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())')); use it with: . $VENV/bin/activate"
