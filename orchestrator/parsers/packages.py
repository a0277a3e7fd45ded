"""Which Debian packages a container lacks, from one `dpkg-query` listing.

Why: a stock debian-12-standard container may lack what the pipeline needs inside it (`python3 -m venv` needs
python3-venv; the health checks use curl; https indexes need ca-certificates). The facts round trip asks dpkg for
the required set; this parser turns its answer into the names to install.

`dpkg-query -W -f '${Package}\\t${db:Status-Status}\\n' P…` prints one line per package dpkg knows (status
`installed`, `config-files`, `half-installed`, …) and, for a name it has never seen, "no packages found matching
P" on stderr with exit code 1. Anything but `installed` counts as missing.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.parsers import ParseError

__all__ = ["DPKG_FORMAT", "missing_packages"]

#: The dpkg-query output format the parser reads: name, TAB, the package's current status.
DPKG_FORMAT = "${Package}\\t${db:Status-Status}\\n"


def missing_packages(required: Sequence[str], stdout: str, stderr: str, rc: int) -> list[str]:
    """The required names dpkg does not report as installed, in the order given.

    Raises ParseError when dpkg-query itself did not run (not a Debian-like system, or the output is not ours).
    """
    if rc not in (0, 1):
        raise ParseError(f"dpkg-query exited {rc}: {(stderr or stdout).strip()[-200:]}")
    status: dict[str, str] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        name, sep, state = line.partition("\t")
        if not sep:
            raise ParseError(f"unexpected dpkg-query line: {line[:120]!r}")
        if status.get(name.split(":", 1)[0]) != "installed":  # a multi-arch name (pkg:amd64) counts for pkg
            status[name.split(":", 1)[0]] = state.strip()
    if rc == 1 and "no packages found" not in stderr:
        raise ParseError(f"dpkg-query failed: {(stderr or stdout).strip()[-200:]}")
    return [p for p in required if status.get(p) != "installed"]
