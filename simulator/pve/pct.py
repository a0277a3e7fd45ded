"""The host's `pct` for `pct exec` and `pct enter` (most of a host's commands): the fast path of the `pct` wrapper.

    python -S -c 'import sys; from simulator.pve.pct import main; sys.exit(main(sys.argv[1:]))' exec VMID [--] CMD...

A well-formed `exec`/`enter` goes straight to simulator/lxc/attach.py (the standard library and the constant-only
layout module: no host config, no API, no conf parser); any other shape (a malformed call included) goes to the full
`pct` (simulator.pve.cli). Here, in pve/, so that lxc/ never imports pve/.
"""

from __future__ import annotations

import sys

from simulator.layout import current_host_dir
from simulator.lxc.attach import ENTER_COMMAND, exec_command


def main(argv: list[str]) -> int:
    """`exec VMID [--] CMD...` or `enter VMID`; any other shape is the full `pct`'s to answer."""
    if len(argv) >= 2 and argv[0] in ("exec", "enter") and argv[1].isascii() and argv[1].isdigit():
        command = argv[2:] if argv[0] == "exec" else ENTER_COMMAND
        return exec_command(current_host_dir(), int(argv[1]), command)
    from simulator.pve.cli import main as pct

    return pct(["pct", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
