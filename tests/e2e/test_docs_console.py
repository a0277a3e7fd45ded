"""The docs' examples run as shown: every `console` block of the pages a new user follows, command by command,
against a simulated host, with the output compared by shape (tests/docs_console.py). A page that stops telling
the truth (a step that now installs where the page says `ok`, a line that is gone) fails here.

The pages use `/tmp/docinv`, `/tmp/docstate`, `/tmp/docsim` and `--first 70`; the test runs them in its own
temporary directory, on a host number proven free, and maps those back before comparing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sim_hosts
from tests.docs_console import console_blocks, shape_mismatch

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("quickstart.md",)
DOC_DIRS = ("docinv", "docstate", "docsim")


def _local(text: str, tmp: Path, number: int) -> str:
    for name in DOC_DIRS:
        text = text.replace(f"/tmp/{name}", str(tmp / name))
    return text.replace("--first 70", f"--first {number}").replace("sim-70", f"sim-{number}")


@pytest.mark.parametrize("page", PAGES)
def test_every_console_block_runs_as_the_page_shows(page: str, tmp_path: Path) -> None:
    number = sim_hosts.claim(sim_hosts.OFFSET_LXC)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEPLOY_INVENTORY", "DEPLOY_STATE_DIR", "DEPLOY_SIM_ROOT")}
    env.update({"PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}", "COLUMNS": "200",
                "PYTHONUNBUFFERED": "1"})
    blocks = console_blocks((DOCS / page).read_text(), page)
    assert blocks, f"{page} has no console block"
    try:
        for block in blocks:
            for cmd in block.commands:
                command = _local(cmd.command, tmp_path, number)
                if command.startswith("export "):
                    for word in shlex.split(command)[1:]:
                        key, _, value = word.partition("=")
                        env[key] = value
                    continue
                res = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, timeout=900)
                real = res.stdout.replace(f"{tmp_path}/", "/tmp/").replace(f"sim-{number}", "sim-70")
                where = f"{page}:{block.line} `$ {cmd.command}`"
                assert res.returncode == 0, f"{where} exited {res.returncode}:\n{real}"
                problem = shape_mismatch(cmd.shown, real)
                assert problem is None, f"{where}: {problem}\n--- what it printed ---\n{real}"
    finally:
        subprocess.run(["bash", "-c", f"deploy sim down --root {shlex.quote(str(tmp_path / 'docsim'))}"],
                       env=env, capture_output=True, timeout=300)
