"""PVE worker tasks: real-format UPIDs, status and log files, the `task_fail` fault.

UPID (pve-common PVE/UPID.pm): `UPID:<node>:<pid 8X>:<pstart 8X>:<starttime 8X>:<type>:<id>:<user>:` with the
trailing colon. Status: `{"status": "running"|"stopped", "exitstatus": "OK"|<error text>}`; the log's last line is
`TASK OK` or `TASK ERROR: <text>`. The API server runs tasks in a thread (the caller polls); pct/pvesh run them in
the foreground like PVE's CLI environment does.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.config import HostPaths, write_json

#: Messages a failing task of each type ends with under the `task_fail` fault (texts seen on real hosts).
FAULT_MESSAGES = {
    "vzstart": "startup for container '{id}' failed",
    "vzstop": "command 'lxc-stop -n {id} --kill' failed: exit code 1",
    "vzshutdown": "command 'lxc-stop -n {id} --nokill --timeout 60' failed: exit code 1",
    "vzcreate": "unable to create CT {id} - command 'lxc-usernsexec -m u:0:100000:65536 -m g:0:100000:65536 "
                "-- tar xpf - --zstd --totals --one-file-system -p --sparse --numeric-owner --acls --xattrs "
                "'--xattrs-include=user.*' '--xattrs-include=security.capability' '--warning=no-file-ignored' "
                "'--warning=no-xattr-write' -C /var/lib/lxc/{id}/rootfs --skip-old-files --anchored "
                "--exclude './dev/*'' failed: exit code 2",
    "vzdestroy": "unable to destroy CT {id} - lvremove failed",
    "download": "download failed: 500 Can't connect to download.proxmox.com:80",
}
MIN_RUNTIME_S = 0.3

_lock = threading.Lock()
_seq = [0]


class TaskError(Exception):
    """Raised by a task body: becomes `TASK ERROR: <message>`."""


def _pstart() -> int:
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])


def new_upid(node: str, typ: str, id_: str, user: str) -> str:
    with _lock:
        _seq[0] += 1
        pid = (os.getpid() + _seq[0] - 1) & 0xFFFFFFFF
    return f"UPID:{node}:{pid:08X}:{_pstart():08X}:{int(time.time()):08X}:{typ}:{id_}:{user}:"


def decode(upid: str) -> dict[str, Any]:
    parts = upid.split(":")
    if len(parts) != 9 or parts[0] != "UPID":
        raise ValueError(f"unable to parse worker upid '{upid}'")
    return {"upid": upid, "node": parts[1], "pid": int(parts[2], 16), "pstart": int(parts[3], 16),
            "starttime": int(parts[4], 16), "type": parts[5], "id": parts[6], "user": parts[7]}


def _files(hp: HostPaths, upid: str) -> tuple[Path, Path]:
    return hp.tasks / f"{upid}.json", hp.tasks / f"{upid}.log"


class TaskLog:
    def __init__(self, path: Path, echo: Callable[[str], None] | None = None):
        self.path = path
        self.echo = echo

    def __call__(self, line: str) -> None:
        with open(self.path, "a") as fh:
            fh.write(line + "\n")
        if self.echo:
            self.echo(line)


#: How often a held task looks whether the `task_hold` fault was cleared.
HOLD_POLL_S = 0.05


def hold_point(hp: HostPaths, typ: str) -> None:
    """The `task_hold` fault: a task body of type `typ` waits here while the knob names it."""
    while hp.load().faults.task_hold == typ:
        time.sleep(HOLD_POLL_S)


def run(hp: HostPaths, typ: str, id_: str, user: str, body: Callable[[TaskLog], None], *,
        background: bool, echo: Callable[[str], None] | None = None,
        on_error: Callable[[], None] | None = None) -> tuple[str, str]:
    """Start a task; returns (upid, exitstatus). In background mode exitstatus is "" (still running).

    `on_error` runs when the task fails (the `task_fail` fault included), before its status says so: the error
    path of PVE's worker (create_vm destroys the CT it locked)."""
    cfg = hp.load()
    upid = new_upid(cfg.node, typ, id_, user)
    status_file, log_file = _files(hp, upid)
    hp.tasks.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    record = {**decode(upid), "status": "running"}
    write_json(status_file, record)
    log = TaskLog(log_file, echo)
    fault = cfg.faults.task_fail

    def work() -> str:
        t0 = time.monotonic()
        try:
            if fault in (typ, "all"):
                raise TaskError(FAULT_MESSAGES.get(typ, "command '{typ}' failed: exit code 1")
                                .format(id=id_, typ=typ))
            body(log)
            exitstatus = "OK"
        except TaskError as exc:
            exitstatus = str(exc).strip()
        except Exception as exc:
            exitstatus = f"{type(exc).__name__}: {exc}"
        if exitstatus != "OK" and on_error is not None:
            try:
                on_error()
            except Exception as exc:  # PVE warns and keeps the task's own error
                log(f"WARN: {exc}")
        if background:
            time.sleep(max(0.0, MIN_RUNTIME_S - (time.monotonic() - t0)))
        with open(log_file, "a") as fh:
            fh.write("TASK OK\n" if exitstatus == "OK" else f"TASK ERROR: {exitstatus}\n")
        write_json(status_file, {**record, "status": "stopped", "exitstatus": exitstatus,
                                 "endtime": int(time.time())})
        return exitstatus

    if background:
        threading.Thread(target=work, name=f"task-{typ}-{id_}", daemon=True).start()
        return upid, ""
    return upid, work()


def status(hp: HostPaths, upid: str) -> dict[str, Any] | None:
    status_file, _ = _files(hp, upid)
    try:
        data: dict[str, Any] = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return None
    return data


def with_token(task: dict[str, Any]) -> dict[str, Any]:
    """pve-manager's convert_token_task: `root@pam!deploy` becomes user `root@pam` plus tokenid `deploy`."""
    user = str(task.get("user", ""))
    if "!" in user:
        name, _, token = user.partition("!")
        return {**task, "user": name, "tokenid": token}
    return task


def owns(task: dict[str, Any], caller: str) -> bool:
    """check_task_user: a token sees only its own tasks; its user sees the user's and the tokens' tasks."""
    task = with_token(task)
    if task.get("tokenid"):
        return caller in (f"{task['user']}!{task['tokenid']}", task["user"])
    return caller == task.get("user")


def log_lines(hp: HostPaths, upid: str, start: int = 0, limit: int = 50) -> tuple[int, list[dict[str, Any]]]:
    """PVE::Tools::dump_logfile: (total line count, the page); limit 0 reads to the end; `n` counts from 1."""
    _, log_file = _files(hp, upid)
    try:
        lines = log_file.read_text().splitlines()
    except FileNotFoundError:
        return 1, [{"n": 1, "t": "unable to open file - No such file or directory"}]
    if not lines:
        return 1, [{"n": 1, "t": "no content"}]
    end = len(lines) if limit == 0 else start + limit
    return len(lines), [{"n": i + 1, "t": lines[i]} for i in range(start, min(end, len(lines)))]


def listing(hp: HostPaths) -> list[dict[str, Any]]:
    out = []
    for f in sorted(hp.tasks.glob("*.json")) if hp.tasks.is_dir() else []:
        try:
            out.append(json.loads(f.read_text()))
        except ValueError:
            continue
    return sorted(out, key=lambda t: t.get("starttime", 0), reverse=True)
