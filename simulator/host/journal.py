"""`journalctl -k` on the simulated host: the kernel log of the current boot (simulator/gpu/health.py writes its
Xid lines), in journald's `short-iso` layout, with real-shaped cursors (`s=<boot>;i=<n>`), `--after-cursor`,
`--show-cursor` and `--since=-Ns`. Other journals are not simulated on the node (the containers run real journald).
"""

from __future__ import annotations

import os
import sys
import time

from simulator.gpu.health import read_kernel
from simulator.gpu.simctx import host_dir_from_env, read_json


def _opt(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def _boot(host_dir: str) -> str:
    try:
        with open(os.path.join(host_dir, "fs", "proc", "sys", "kernel", "random", "boot_id")) as f:
            return f.read().strip().replace("-", "") or "0"
    except OSError:
        return "0"


def main(argv: list[str]) -> int:
    if not any(a in ("-k", "--dmesg") for a in argv):
        sys.stderr.write("journalctl (sim): only the kernel log (-k) of the node is simulated\n")
        return 1
    host_dir = host_dir_from_env()
    node = str(read_json(os.path.join(host_dir, "host.json")).get("node") or "pve")
    boot = _boot(host_dir)
    entries = read_kernel(host_dir)
    after = _opt(argv, "--after-cursor")
    first = 0
    if after and after.startswith(f"s={boot};i="):
        first = int(after.rsplit("=", 1)[1]) + 1
    since = _opt(argv, "--since")
    oldest = time.time() + float(since[:-1]) if since and since.startswith("-") and since.endswith("s") else None
    shown = [(n, t, text) for n, (t, text) in enumerate(entries) if n >= first and (oldest is None or t >= oldest)]
    out = sys.stdout
    for _, t, text in shown:
        out.write(time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t)) + f" {node} kernel: {text}\n")
    if not shown and "-q" not in argv and "--quiet" not in argv:
        out.write("-- No entries --\n")
    if "--show-cursor" in argv and shown:
        out.write(f"-- cursor: s={boot};i={shown[-1][0]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
