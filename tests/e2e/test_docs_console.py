"""The docs' examples run as shown: every `console` block of the pages a new user follows, command by command,
against simulated hosts, with the output compared by shape (tests/docs_console.py). A page that stops telling
the truth (a step that now installs where the page says `ok`, a line that is gone) fails here.

The pages use directories under /tmp (`/tmp/docinv`, `/tmp/fleetsim`, …) and `--first N`; the test runs them in
its own temporary directory, on host numbers proven free, and maps those back before comparing.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sim_hosts
from tests.docs_console import console_blocks, shape_mismatch

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("quickstart.md", "fleet.md")
DOC_DIR = re.compile(r"/tmp/((?:doc|fleet)\w*)")
FIRST = re.compile(r"--first (\d+)")
HOSTS = re.compile(r"--hosts (\d+)")


class PageHosts:
    """The page's host numbers (`--first N`, `--hosts K`) and the free ones this run uses instead."""

    def __init__(self, commands: list[str]) -> None:
        text = "\n".join(commands)
        first, count = FIRST.search(text), HOSTS.search(text)
        self.doc_first = int(first.group(1)) if first else 1
        self.count = int(count.group(1)) if count else 1
        self.first = sim_hosts.claim(sim_hosts.OFFSET_LXC, self.count)

    def _swap(self, text: str, a: int, b: int) -> str:
        for i in reversed(range(self.count)):
            text = re.sub(rf"\bsim-{a + i}\b", f"sim-{b + i}", text)
        return text

    def local(self, text: str, tmp: Path) -> str:
        text = DOC_DIR.sub(lambda m: str(tmp / m.group(1)), text)
        text = text.replace(f"--first {self.doc_first}", f"--first {self.first}")
        return self._swap(text, self.doc_first, self.first)

    def as_page(self, text: str, tmp: Path) -> str:
        return self._swap(text.replace(f"{tmp}/", "/tmp/"), self.first, self.doc_first)


@pytest.mark.parametrize("page", PAGES)
def test_every_console_block_runs_as_the_page_shows(page: str, tmp_path: Path) -> None:
    blocks = console_blocks((DOCS / page).read_text(), page)
    assert blocks, f"{page} has no console block"
    hosts = PageHosts([c.command for b in blocks for c in b.commands])
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEPLOY_INVENTORY", "DEPLOY_STATE_DIR", "DEPLOY_SIM_ROOT")}
    env.update({"PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}", "COLUMNS": "200",
                "PYTHONUNBUFFERED": "1"})
    roots: list[str] = []
    try:
        for block in blocks:
            for cmd in block.commands:
                command = hosts.local(cmd.command, tmp_path)
                if command.startswith("export "):
                    for word in shlex.split(command)[1:]:
                        key, _, value = word.partition("=")
                        env[key] = value
                    continue
                roots += re.findall(r"--root (\S+)", command) if " sim up " in f" {command} " else []
                res = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, timeout=1200)
                real = hosts.as_page(res.stdout, tmp_path)
                where = f"{page}:{block.line} `$ {cmd.command}`"
                assert res.returncode == 0, f"{where} exited {res.returncode}:\n{real}"
                problem = shape_mismatch(cmd.shown, real)
                assert problem is None, f"{where}: {problem}\n--- what it printed ---\n{real}"
    finally:
        for root in roots:
            subprocess.run(["bash", "-c", f"deploy sim down --root {shlex.quote(root)}"], env=env,
                           capture_output=True, timeout=300)
