"""The host kernel log's NVRM Xid lines (journald `journalctl -k` or dmesg format), and the cursor after them.

Why the host: Xids are logged by the kernel module, which only the PVE node runs; the container never sees them.
Why a cursor: a Xid the operator already remedied must not be reported again (NVIDIA/k8s-device-plugin#234 marks a
GPU unhealthy forever after any Xid); journald's cursor names the last entry read, dmesg's (where there is no
journald) the boot and the timestamp of the last line, and a reboot starts a new log.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

#: `NVRM: Xid (PCI:0000:06:00): 79, pid=1234, name=python3, GPU has fallen off the bus.` (older drivers omit `PCI:`,
#: some omit pid/name).
_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (?P<code>\d+)"
                     r"(?:, pid=(?P<pid>[^,]*))?(?:, name=(?P<name>[^,]*))?(?:, (?P<text>.*))?$")
#: Where the cursor of the last remedied kernel-log entry is kept on the host (written by the remedy that cleared the
#: Xids before it; absent: the whole current boot is read, and a reboot starts a new log).
CURSOR_PATH = "/var/lib/deploy/hardware/kernel.cursor"
_CURSOR_RE = re.compile(r"^-- cursor: (?P<cursor>\S+)\s*$")


@dataclass(frozen=True)
class XidEvent:
    """One Xid line: its GPU (`0000:06:00`, PCI domain:bus:device), code, the process, the driver's text."""

    pci: str
    code: int
    line: str
    pid: str | None = None
    name: str | None = None
    text: str = ""

    @property
    def bus_id(self) -> str:
        """The GPU's bus id as nvidia-smi prints it (`00000000:06:00.0`), to join with its other sensors."""
        return f"0000{self.pci.upper()}.0"


#: Xid 154's text: `GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)` (some drivers omit the
#: `from` part).
_RECOVERY_RE = re.compile(r"GPU recovery action changed (?:from 0x[0-9a-fA-F]+ \([^)]*\) )?to 0x(?P<code>[0-9a-fA-F]+)"
                          r"(?: \((?P<label>[^)]*)\))?")


def recovery_change(ev: XidEvent) -> tuple[int, str] | None:
    """Xid 154's new recovery action: its code (NVML nvmlGpuRecoveryAction_t) and the driver's label; None for any
    other line, or a 154 whose text names no action."""
    if ev.code != 154:
        return None
    m = _RECOVERY_RE.search(ev.line)
    if m is None:
        return None
    code = int(m.group("code"), 16)
    return code, m.group("label") or f"0x{code:x}"


@dataclass(frozen=True)
class KernelLog:
    """The Xids read since the last cursor; `cursor`: where the next read starts (None: no journald cursor)."""

    events: tuple[XidEvent, ...]
    cursor: str | None = None


#: Where there is no journald: dmesg's Xid lines after the stored `dmesg:BOOT_ID:SECONDS` cursor (the seconds since
#: boot in dmesg's `[ 5107.644336]` stamp; a cursor of another boot reads the whole boot, as journald's does), then
#: the cursor of dmesg's last line. awk (POSIX: mawk and gawk alike) with the cursor and boot id as -v values.
DMESG_AWK = (
    'BEGIN { p = "dmesg:" b ":"; t0 = -1; if (b != "" && index(c, p) == 1) t0 = substr(c, length(p) + 1) + 0 } '
    r'match($0, /^\[ *[0-9]+\.[0-9]+\]/) { s = substr($0, 2, RLENGTH - 2); gsub(/ /, "", s); t = s + 0; last = s } '
    '/NVRM: Xid/ && t > t0 { print } '
    'END { if (b != "" && last != "") print "-- cursor: dmesg:" b ":" last }')


def kernel_log_command(cursor_path: str = CURSOR_PATH) -> str:
    """The host's NVRM Xid lines since the stored cursor and the cursor after the last entry: journald's, or where
    there is no journald dmesg's (`dmesg:BOOT_ID:SECONDS`). Reads only; prints nothing but those lines."""
    path = shlex.quote(cursor_path)
    return (f"c=$(cat {path} 2>/dev/null); if command -v journalctl >/dev/null 2>&1; then "
            "journalctl -k -q --no-pager -o short-iso --show-cursor ${c:+\"--after-cursor=$c\"} "
            "| grep -E 'NVRM: Xid|^-- cursor:'; else dmesg 2>/dev/null | awk -v \"c=$c\" "
            "-v \"b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)\" " + shlex.quote(DMESG_AWK) + "; fi; true")


def parse_xid_line(line: str) -> XidEvent | None:
    m = _XID_RE.search(line.rstrip())
    if m is None:
        return None
    return XidEvent(pci=m.group("pci").lower(), code=int(m.group("code")), line=line.strip(),
                    pid=m.group("pid"), name=m.group("name"), text=(m.group("text") or "").strip())


def parse_kernel_log(text: str) -> KernelLog:
    """Every Xid line of `journalctl -k --show-cursor` or `dmesg` output, in order, and the trailing cursor."""
    events: list[XidEvent] = []
    cursor: str | None = None
    for line in text.splitlines():
        c = _CURSOR_RE.match(line)
        if c:
            cursor = c.group("cursor")
            continue
        ev = parse_xid_line(line)
        if ev is not None:
            events.append(ev)
    return KernelLog(tuple(events), cursor)
