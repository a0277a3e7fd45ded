"""The real captures in ../shared/fixtures (read-only): one reader for every test that uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"


def fixture(rel: str) -> str:
    """The text of a shared fixture; the test is skipped (not failed) where ../shared is absent."""
    path = FIXTURES / rel
    if not path.exists():
        pytest.skip(f"shared fixture {rel} not present")
    return path.read_text()
