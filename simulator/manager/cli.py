"""Bring simulated Proxmox hosts up and down (`deploy sim up|down|status`, the pytest fixture).

    python -m simulator.manager up [--hosts N] [--profile NAME] [--root DIR]
    python -m simulator.manager down|status [--root DIR]
    python -m simulator.manager faults sim-1 ssh_drop_after=2 task_fail=vzstart
    python -m simulator.manager ct-faults sim-1 120 crash_on_start=true
    python -m simulator.manager reboot sim-1

Host sim-N listens on 127.0.0.(N+1) (beyond sim-253: 127.0.1.1, …, see layout.host_address): a real sshd on :2222 and
the HTTPS API on :8006. Daemons are started detached (own session, stdio to log files) so they outlive the CLI;
`down` stops exactly what `up` started, plus every container, and is safe to repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from simulator.config import DEFAULT_ROOT, GPU_PROFILES, ROOT_ENV
from simulator.lxc import storage as lxc_storage
from simulator.manager.faults import set_ct_faults, set_faults
from simulator.manager.lifecycle import SimHostInfo, sim_down, sim_reboot, sim_status, sim_up


def _parse_knob(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise SystemExit(f"fault knob {text!r}: write KEY=VALUE")
    value: Any
    if raw.lower() in ("true", "yes", "on"):
        value = True
    elif raw.lower() in ("false", "no", "off"):
        value = False
    elif raw.lower() in ("none", "null", ""):
        value = None
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.manager", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT))
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--hosts", type=int, default=1)
    up.add_argument("--profile", choices=GPU_PROFILES, default="rtx-pro-6000-x8")
    up.add_argument("--driver", default=None)
    up.add_argument("--time-scale", type=float, default=1.0)
    up.add_argument("--inventory-copy", type=Path, default=None)
    up.add_argument("--first", type=int, default=1)
    up.add_argument("--ct-storage", choices=lxc_storage.STORAGES, default="disk")
    up.add_argument("--cluster", default=None)
    sub.add_parser("down")
    sub.add_parser("status")
    f = sub.add_parser("faults")
    f.add_argument("host")
    f.add_argument("knobs", nargs="*")
    rb = sub.add_parser("reboot")
    rb.add_argument("host")
    cf = sub.add_parser("ct-faults")
    cf.add_argument("host")
    cf.add_argument("vmid", type=int)
    cf.add_argument("knobs", nargs="*")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            before = {i.name for i in sim_status(args.root) if i.running}
            infos = sim_up(args.root, args.hosts, args.profile, args.driver, args.time_scale, args.inventory_copy,
                           first=args.first, ct_storage=args.ct_storage, cluster=args.cluster)
            _report(infos, args.json, before)
        elif args.cmd == "down":
            sim_down(args.root)
            if not args.json:
                print(f"simulated hosts under {args.root} stopped")
        elif args.cmd == "status":
            _report(sim_status(args.root), args.json, set())
        elif args.cmd == "faults":
            print(json.dumps(dataclasses.asdict(set_faults(args.root, args.host,
                                                           **dict(map(_parse_knob, args.knobs))))))
        elif args.cmd == "reboot":
            print("\n".join(sim_reboot(args.root, args.host)))
        elif args.cmd == "ct-faults":
            print(json.dumps(dataclasses.asdict(set_ct_faults(args.root, args.host, args.vmid,
                                                              **dict(map(_parse_knob, args.knobs))))))
    except (RuntimeError, ValueError) as exc:  # StorageError, AddressInUse … are RuntimeErrors
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _report(infos: list[SimHostInfo], as_json: bool, already: set[str]) -> None:
    if as_json:
        print(json.dumps([i.to_dict() for i in infos], indent=2))
        return
    if not infos:
        print("no simulated hosts")
    for i in infos:
        state = "running" if i.running else "stopped"
        note = " (already running)" if i.name in already else ""
        cts = ", ".join(f"{v}:{s}" for v, s in i.containers.items()) or "none"
        print(f"{i.name}: {state}{note}  ssh root@{i.address} -p {i.ssh_port} -i {i.key_file}  "
              f"api https://{i.address}:{i.api_port}  profile {i.gpu_profile}  containers {cts}")
