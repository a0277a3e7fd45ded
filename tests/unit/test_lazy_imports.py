"""`deploy --help` loads only click and the CLI's own plumbing: no SSH stack, plots, simulator, pydantic or rich.

Why: every `deploy` run pays its imports before it does anything, and `--help` (or a usage error) should answer at
once. The check runs the real entry point in a fresh interpreter and reads `-X importtime`, which names every
module imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Top-level packages `deploy --help` must not import (each is imported by the commands that use it).
HEAVY = ("paramiko", "fabric", "invoke", "matplotlib", "simulator", "pydantic", "rich", "yaml", "jinja2",
         "proxmoxer", "requests", "sqlite3", "cryptography")


def imported_by(*argv: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "orchestrator", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert "Usage: deploy" in proc.stdout, proc.stdout + proc.stderr
    names = (line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
             if line.startswith("import time:"))
    return {name.split(".")[0] for name in names}


def test_help_imports_nothing_heavy() -> None:
    top = imported_by("--help")
    assert "click" in top and "orchestrator" in top  # the parse above read the real list
    assert not top & set(HEAVY), sorted(top & set(HEAVY))
