#!/usr/bin/env bash
# The main job against the built-in simulated host: install, start the simulated Proxmox GPU host on loopback,
# converge it with `deploy up`, run `up` again (no changes), then show status and P2P.
# The simulated host is sim-1 on 127.0.0.2; DEPLOY_DEMO_FIRST=N puts it on sim-N (127.0.0.(N+1)) instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
VENV=${DEPLOY_VENV:-$PWD/.venv}
export PATH="$VENV/bin:$PATH"
N=${DEPLOY_DEMO_FIRST:-1}
HOST=sim-$N
deploy sim up --first "$N"
deploy up host "$HOST"
echo
echo "== second run: nothing to change =="
deploy up host "$HOST"
echo
deploy status host "$HOST"
deploy verify-p2p host "$HOST"
echo
echo "The simulated host keeps running; stop it with: $VENV/bin/deploy sim down"
