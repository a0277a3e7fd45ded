#!/usr/bin/env bash
# The main job against the built-in simulated host: install, start the simulated Proxmox GPU host on loopback,
# converge it with `deploy up`, run `up` again (no changes), then show status and P2P.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
deploy sim up
deploy up host sim-1
echo
echo "== second run: nothing to change =="
deploy up host sim-1
echo
deploy status host sim-1
deploy verify-p2p host sim-1
echo
echo "The simulated host keeps running; stop it with: deploy sim down"
