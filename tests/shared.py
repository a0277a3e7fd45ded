"""The real captures in tests/fixtures (see its README for where each came from): one reader for every test.

They live inside the repository (a clean clone has nothing beside it), and no test reads outside it;
a missing capture is a broken checkout, so it fails the test instead of skipping it.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.resources import example_inventory_dir

#: The example inventory shipped in the package; tests never read the checkout's ./inventory (the demo's).
EXAMPLE_INVENTORY = example_inventory_dir()
FIXTURES = Path(__file__).resolve().parent / "fixtures"
NVIDIA_SMI = FIXTURES / "nvidia-smi"
H200_NVLINK = NVIDIA_SMI / "h200x2-nvlink"  # 2x H200 NV18, driver 580.159.04: the most-used capture set


def fixture(rel: str) -> str:
    """The text of tests/fixtures/<rel>."""
    return (FIXTURES / rel).read_text()
