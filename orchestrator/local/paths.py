"""Where the tool finds the user's inventory by default and where it keeps local state.

Data shipped inside the package (templates, playbooks, the example inventory) is orchestrator/resources.py's.
"""

from __future__ import annotations

import os
import stat
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


def state_dir_problem(path: Path) -> str | None:
    """Why another local user could plant or replace a file of the state directory `path` (None: nobody can).

    The directory (its real path; the nearest existing one above it when it is not made yet) must be this user's and
    writable by nobody else; every directory above it must belong to this user or root, and one that others may
    write must be sticky (/tmp: nobody may rename what another user made there). A state dir in a shared /tmp folder
    that another user made first, or whose folder another user owns, is refused."""
    real = Path(os.path.realpath(path))
    chain = [real, *real.parents]
    first = True
    for folder in chain:
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{folder} cannot be read ({exc.strerror})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{folder} is not a directory"
        if st.st_uid not in (os.geteuid(), 0):
            return f"{folder} belongs to uid {st.st_uid}, another user"
        open_to = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if first and folder == real:
            if st.st_uid != os.geteuid():
                return f"{folder} belongs to uid {st.st_uid}, not to this user"
            if open_to:
                return f"{folder} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'}"
        elif open_to and not st.st_mode & stat.S_ISVTX:
            return f"{folder} is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} and not sticky"
        first = False
    return None
