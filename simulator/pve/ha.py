"""HA-managed containers (the CtFaults knob `ha_managed`): a start or stop of such a CT is a request to the HA
manager, as pve-container's API does for a CT in /etc/pve/ha/resources.cfg (`ha-manager set ct:VMID --state
started`, task type `hastart`/`hastop`). The task ends as soon as the request is made; the HA stack's local
resource manager acts on it a few seconds later (`ha_delay_s`), here a detached helper process, so the CT is
still stopped (or still running) when the task says OK.

    python -m simulator.pve.ha <host_dir> <vmid> started|stopped <delay_s>
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Literal

from simulator import procs
from simulator.config import HostPaths

State = Literal["started", "stopped"]


def request(hp: HostPaths, vmid: int, state: State, delay_s: float) -> None:
    """Hand the request to the (simulated) HA manager and return at once, as `ha-manager set` does."""
    argv = [sys.executable, "-m", "simulator.pve.ha", str(hp.dir), str(vmid), state, str(delay_s)]
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(Path(__file__).resolve().parents[2])}
    procs.start_detached(argv, hp.dir / "ha" / f"{vmid}.log", env=env, cwd=hp.dir)


def act(hp: HostPaths, vmid: int, state: State, delay_s: float) -> None:
    """The local resource manager: after `delay_s`, bring the CT to the requested state."""
    from simulator.pve.lxc import Node

    time.sleep(delay_s)
    node = Node(hp)
    if state == "started" and not node.running(vmid):
        node.start(vmid, lambda line: print(line, flush=True))
    elif state == "stopped" and node.running(vmid):
        node.stop(vmid, lambda line: print(line, flush=True), graceful_timeout_s=60, force=True, lock_check="skip")
    print(f"CT {vmid}: {state}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[3] not in ("started", "stopped"):
        raise SystemExit(__doc__)
    act(HostPaths(Path(sys.argv[1])), int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))  # type: ignore[arg-type]
