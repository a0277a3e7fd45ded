"""Fixtures shared by unit tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    """A private copy of the example inventory shipped in the package, to edit freely."""
    d = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, d)
    return d
