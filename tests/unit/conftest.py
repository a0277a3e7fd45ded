"""Fixtures shared by unit tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
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


@pytest.fixture
def local_inv(inv: Path) -> Path:
    """The example inventory with its host on a closed loopback port and `example: false` (else exit 2 would come
    from the example guard): a command that got as far as connecting fails fast with exit 3."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("address: 10.1.230.174", "address: 127.0.0.1")
                     .replace("example: true", "example: false").replace("port: 22", f"port: {port}"))
    return inv


@pytest.fixture
def full_tmpdir(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs filled to the last page: files can be made there, their writes fail (ENOSPC)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "deploy-test-full", str(small)], check=True)
    try:
        subprocess.run(["sh", "-c", f"cat /dev/zero > {small}/filler"], capture_output=True, check=False)
        yield small
    finally:
        subprocess.run(["umount", str(small)], check=True)
