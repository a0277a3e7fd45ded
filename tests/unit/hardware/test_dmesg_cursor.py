"""The kernel-log read where there is no journald (issue 39): the real command (kernel_log_command) run by bash
with a `dmesg` that prints the real capture's lines and no `journalctl` on PATH. Its cursor `dmesg:BOOT:SECONDS`
skips the Xids already read, a cursor of another boot reads the whole boot, and the parser takes its cursor line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.hardware.kernel_log import kernel_log_command, parse_kernel_log
from tests.shared import fixture

BOOT = Path("/proc/sys/kernel/random/boot_id").read_text().strip() if Path("/proc/sys/kernel/random/boot_id").exists() \
    else ""
#: The real H200 boot's dmesg lines (tests/fixtures/nvidia-smi/h200-health/dmesg-nvrm.txt), then two Xids as the
#: kernel stamps them (the lines of tests/fixtures/hardware/dmesg-xid.txt, restamped in boot order).
DMESG = (fixture("nvidia-smi/h200-health/dmesg-nvrm.txt").rstrip("\n") + "\n"
         "[ 5107.644336] NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus.\n"
         "[ 5200.000001] nvidia 0000:03:00.0: not a Xid line\n"
         "[ 6001.500000] NVRM: Xid (PCI:0000:04:00): 13, pid=4242, name=python3, Graphics SM Warp Exception\n")


def _read(tmp_path: Path, cursor: str | None) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", "sh", "cat", "awk", "grep"):  # the host's tools, but no journalctl
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    (tmp_path / "dmesg.txt").write_text(DMESG)
    dmesg = bin_dir / "dmesg"
    dmesg.write_text(f"#!/bin/sh\nexec cat {tmp_path / 'dmesg.txt'}\n")
    dmesg.chmod(0o755)
    path = tmp_path / "kernel.cursor"
    if cursor is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(cursor + "\n")
    res = subprocess.run([str(bin_dir / "bash"), "-c", kernel_log_command(str(path))], capture_output=True,
                         text=True, env={**os.environ, "PATH": str(bin_dir)}, check=True)
    return res.stdout


@pytest.mark.skipif(not BOOT or shutil.which("awk") is None, reason="needs /proc's boot id and awk")
def test_dmesg_cursor_skips_the_xids_already_read(tmp_path: Path) -> None:
    first = parse_kernel_log(_read(tmp_path, None))
    assert [e.code for e in first.events] == [79, 13]
    assert first.cursor == f"dmesg:{BOOT}:6001.500000"  # dmesg's last line, the next read starts after it

    assert parse_kernel_log(_read(tmp_path, first.cursor)).events == ()
    after_79 = parse_kernel_log(_read(tmp_path, f"dmesg:{BOOT}:5107.644336"))
    assert [e.code for e in after_79.events] == [13] and after_79.cursor == first.cursor
    other_boot = parse_kernel_log(_read(tmp_path, "dmesg:00000000-0000-0000-0000-000000000000:9999.0"))
    assert [e.code for e in other_boot.events] == [79, 13]  # a cursor of an earlier boot: the whole boot
    journald = parse_kernel_log(_read(tmp_path, "s=91dfc32cebdc4137a0d3c96b19f3b261;i=0"))
    assert [e.code for e in journald.events] == [79, 13]  # a journald cursor means nothing to dmesg
