"""The real captures in tests/fixtures (see its README for where each came from): one reader for every test.

They live inside the repository (a clean clone has nothing beside it), and no test reads outside it;
a missing capture is a broken checkout, so it fails the test instead of skipping it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.remote.batch import CommandOutput
from orchestrator.resources import example_inventory_dir
from orchestrator.verdicts.host import HostFacts

#: The example inventory shipped in the package; tests never read the checkout's ./inventory (the demo's).
EXAMPLE_INVENTORY = example_inventory_dir()
FIXTURES = Path(__file__).resolve().parent / "fixtures"
NVIDIA_SMI = FIXTURES / "nvidia-smi"
H200_NVLINK = NVIDIA_SMI / "h200x2-nvlink"  # 2x H200 NV18, driver 580.159.04: the most-used capture set


def fixture(rel: str) -> str:
    """The text of tests/fixtures/<rel>."""
    return (FIXTURES / rel).read_text()


def doctor_host_facts(outputs: dict[Any, str | CommandOutput]) -> HostFacts:
    """HostFacts as the doctor step builds them: each output read by its own fact's parser (a text is an exit-0
    stdout; a fact left out was not read), through steps.host.host_facts, the one path from outputs to HostFacts."""
    from orchestrator.facts import Facts
    from orchestrator.inventory.loader import load_inventory
    from orchestrator.steps.host import host_facts

    inv = load_inventory(EXAMPLE_INVENTORY)
    host = inv.hosts["pve-gpu-1"]
    facts = Facts(None, host, inv.profile_for(host))  # type: ignore[arg-type]  # nothing is gathered here
    facts.host = {fact.name: out if isinstance(out, CommandOutput) else CommandOutput(0, out, "")
                  for fact, out in outputs.items()}
    return host_facts(facts)


DEVELOPMENT_MD = Path(__file__).resolve().parents[1] / "docs" / "development.md"


def doc_examples(heading: str) -> list[str]:
    """The ```python blocks of docs/development.md's section `heading` (a heading line without its #s), in order,
    to the next heading of the same or a higher level: a worked example's code as the reader sees it, for the test
    that runs it (a section or block that went away fails that test)."""
    lines = DEVELOPMENT_MD.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("#").strip() == heading and line.startswith("#"))
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    blocks: list[str] = []
    block: list[str] | None = None
    for line in lines[start + 1:]:
        if block is None and line.startswith("#") and len(line) - len(line.lstrip("#")) <= level:
            break
        if block is None and line.strip() == "```python":
            block = []
        elif block is not None and line.strip() == "```":
            blocks.append("\n".join(block) + "\n")
            block = None
        elif block is not None:
            block.append(line)
    assert blocks, f"no python example under {heading!r} in docs/development.md"
    return blocks
