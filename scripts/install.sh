#!/usr/bin/env bash
# Install what deploy and its simulated host need on a fresh Debian machine (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (apt packages; the simulator needs namespaces and sshd)" >&2
  exit 2
fi
need_apt=0
for bin in /usr/sbin/sshd ip curl flock unshare nsenter; do
  command -v "$bin" >/dev/null 2>&1 || need_apt=1
done
if [ "$need_apt" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends openssh-server openssh-client iproute2 util-linux curl \
    procps ca-certificates >/dev/null
fi
PY=${PYTHON:-python3}
"$PY" -m pip install --quiet --disable-pip-version-check -e '.[test]'
