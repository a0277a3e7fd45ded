"""Where the tool finds the user's inventory by default and where it keeps local state.

Data shipped inside the package (templates, playbooks, the example inventory) is orchestrator/resources.py's.
"""

from __future__ import annotations

import os
from pathlib import Path

INVENTORY_ENV = "DEPLOY_INVENTORY"
STATE_ENV = "DEPLOY_STATE_DIR"


def default_inventory_dir() -> Path:
    """`--inventory` default: $DEPLOY_INVENTORY, else ./inventory."""
    return Path(os.environ.get(INVENTORY_ENV, "inventory"))


def state_dir() -> Path:
    """Local state (ledger, known_hosts for TOFU): $DEPLOY_STATE_DIR, else the XDG state dir."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "deploy"
