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


#: What a single-host `up`, `plan` or `status` loads that none of them uses in a converged run (issue 41): fabric and
#: invoke (paramiko.config imports invoke whenever it is installed; invoke brings unittest.mock and asyncio), requests
#: (only a webhook post, the router and the PVE API use it), and the bench, its ledger and the P2P bandwidth probe;
#: (issue 47) tenacity and concurrent.futures (only a wait for /health after a restart retries), and the fleet's live
#: view with rich's live display, tables and spinner (fleet runs, and a step's spinner on a terminal).
UNUSED_BY_A_CONVERGED_RUN = ("fabric", "invoke", "unittest", "asyncio", "requests", "urllib3", "sqlite3",
                             "orchestrator.bench.run", "orchestrator.ledger.sqlite", "orchestrator.p2p.bandwidth",
                             "orchestrator.gates.throughput", "orchestrator.parsers.bench", "tenacity",
                             "concurrent.futures", "orchestrator.fleet.view", "rich.live", "rich.status")


def test_a_single_host_run_loads_only_what_it_uses() -> None:
    """The modules every single-host `up`/`plan`/`status` loads before it connects: its command module, the runner,
    the SSH adapter and every step of the playbooks. Read in a fresh interpreter (sys.modules afterwards), because
    the modules reached through importlib.import_module never show in -X importtime."""
    code = ("import sys; import orchestrator.cli.up_cmd, orchestrator.cli.roll_cmd, orchestrator.remote.ssh; "
            "from orchestrator.steps import load_all_steps; load_all_steps(); print(' '.join(sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=True)
    loaded = set(proc.stdout.split())
    assert "paramiko" in loaded and "orchestrator.steps.checks" in loaded  # the list above is the real one
    tops = {name.split(".")[0] for name in loaded}
    assert not {m for m in UNUSED_BY_A_CONVERGED_RUN if m in loaded or m in tops}, sorted(
        m for m in UNUSED_BY_A_CONVERGED_RUN if m in loaded or m in tops)


def test_the_process_leaves_its_objects_to_the_exit() -> None:
    """`deploy`'s main freezes the collector as it ends, so the interpreter's teardown does not walk every object of
    the loaded modules again (issue 41); read by an atexit handler, which runs after main has returned."""
    code = ("import atexit, gc, sys; atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0)); "
            "sys.argv = ['deploy', '--help']; from orchestrator.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0 and "Usage: deploy" in proc.stdout, proc.stdout + proc.stderr
    assert "frozen True" in proc.stdout
