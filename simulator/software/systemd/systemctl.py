"""`systemctl` inside a simulated container: enough of systemd for the deploy tool's unit lifecycle.

Semantics kept from systemd because the tool depends on them: a unit is loaded on first use and then only
re-read on `daemon-reload` (with systemd's warning when the file changed on disk); `start` returns at once
(Type=simple) with the service detached from the caller; exit codes of is-active (0/3), status (0/3/4).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .state import CtUnits, pid_alive, systemd_log, unit_name
from .unit import Unit, parse_unit

REPO = Path(__file__).resolve().parents[3]
PROPS = ("Id", "Names", "Description", "LoadState", "ActiveState", "SubState", "UnitFileState", "FragmentPath",
         "MainPID", "ExecMainPID", "ExecMainStatus", "NRestarts", "Result", "ActiveEnterTimestamp", "Restart")


class CtlError(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code, self.text = code, text


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(units: CtUnits, name: str, reload: bool = False) -> Unit | None:
    """The unit as systemd has it loaded; loads from disk the first time (or on daemon-reload)."""
    path, loaded = units.unit_file(name), units.loaded_file(name)
    if not reload and loaded.exists():
        data = json.loads(loaded.read_text())
        if path.exists() and data.get("digest") != _digest(path):
            sys.stderr.write(f"Warning: The unit file, source configuration file or drop-ins of {name} changed on "
                             "disk. Run 'systemctl daemon-reload' to reload units.\n")
        return Unit.from_dict(data["unit"])
    if not path.exists():
        loaded.unlink(missing_ok=True)
        return None
    unit = parse_unit(name, path.read_text(), fragment_path=f"/etc/systemd/system/{name}")
    loaded.parent.mkdir(parents=True, exist_ok=True)
    loaded.write_text(json.dumps({"digest": _digest(path), "unit": unit.to_dict()}))
    return unit


def daemon_reload(units: CtUnits) -> None:
    folder = units.ct_dir / "run"
    for loaded in folder.glob("*.loaded.json") if folder.is_dir() else []:
        load(units, loaded.name.removesuffix(".loaded.json"), reload=True)


def active_state(units: CtUnits, name: str) -> dict[str, Any]:
    """Runtime state, corrected when the supervisor died without saying so."""
    st = units.read_state(name)
    if st.get("ActiveState") in ("active", "activating", "deactivating") and not pid_alive(
            int(st.get("SupervisorPID") or 0)):
        st = units.write_state(name, ActiveState="failed", SubState="failed", MainPID=0, Result="signal")
    return st


def start(units: CtUnits, name: str) -> None:
    unit = load(units, name)
    if unit is None:
        raise CtlError(5, f"Failed to start {name}: Unit {name} not found.\n")
    if active_state(units, name).get("ActiveState") in ("active", "activating"):
        return
    units.write_state(name, ActiveState="activating", SubState="start", MainPID=0, SupervisorPID=0, NRestarts=0,
                      Result="success")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-S", "-m", "simulator.software.systemd.supervisor", str(units.ct_dir), name,
         str(units.loaded_file(name))],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
        start_new_session=True, env=env, cwd="/")
    units.write_state(name, SupervisorPID=proc.pid)
    deadline = time.time() + 3.0
    while time.time() < deadline:
        st = units.read_state(name)
        if st.get("MainPID") or st.get("ActiveState") in ("failed", "inactive"):
            break
        time.sleep(0.02)


def stop(units: CtUnits, name: str) -> None:
    unit = load(units, name)
    st = active_state(units, name)
    sup = int(st.get("SupervisorPID") or 0)
    if st.get("ActiveState") not in ("active", "activating") or not pid_alive(sup):
        if st.get("ActiveState") == "failed":
            return
        units.write_state(name, ActiveState="inactive", SubState="dead", MainPID=0, SupervisorPID=0)
        return
    desc = unit.description if unit and unit.description else name
    systemd_log(units, name, f"Stopping {name} - {desc}...")
    units.write_state(name, ActiveState="deactivating", SubState="stop-sigterm")
    os.kill(sup, signal.SIGTERM)
    timeout = (unit.timeout_stop_sec if unit else 90.0) + 5.0
    deadline = time.time() + timeout
    while pid_alive(sup) and time.time() < deadline:
        time.sleep(0.02)


def _ts(epoch: float | None) -> str:
    return time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(epoch)) if epoch else ""


def properties(units: CtUnits, name: str) -> dict[str, str]:
    unit = load(units, name)
    st = active_state(units, name)
    enabled = units.wants_link(name).exists() or units.wants_link(name).is_symlink()
    return {
        "Id": name, "Names": name, "Description": unit.description if unit else "",
        "LoadState": "loaded" if unit else "not-found",
        "ActiveState": str(st.get("ActiveState", "inactive")), "SubState": str(st.get("SubState", "dead")),
        "UnitFileState": ("enabled" if enabled else "disabled") if unit else "",
        "FragmentPath": unit.fragment_path if unit else "",
        "MainPID": str(st.get("MainPID") or 0), "ExecMainPID": str(st.get("MainPID") or 0),
        "ExecMainStatus": str(st.get("ExecMainStatus") or 0), "NRestarts": str(st.get("NRestarts") or 0),
        "Result": str(st.get("Result", "success")), "ActiveEnterTimestamp": _ts(st.get("ActiveEnterTimestamp")),
        "Restart": unit.restart if unit else "no",
    }


def status_text(units: CtUnits, name: str) -> tuple[str, int]:
    unit = load(units, name)
    if unit is None:
        raise CtlError(4, f"Unit {name} could not be found.\n")
    p = properties(units, name)
    active, sub = p["ActiveState"], p["SubState"]
    since = units.read_state(name).get("ActiveEnterTimestamp")
    ago = f"; {int(time.time() - since)}s ago" if since and active == "active" else ""
    dot = "●" if active in ("active", "failed") else "○"
    lines = [
        f"{dot} {name} - {unit.description or name}",
        f"     Loaded: loaded ({unit.fragment_path}; {p['UnitFileState']}; preset: enabled)",
        f"     Active: {active} ({'Result: ' + p['Result'] if active == 'failed' else sub})"
        + (f" since {p['ActiveEnterTimestamp']}{ago}" if ago else ""),
    ]
    if p["MainPID"] != "0":
        exe = Path(unit.exec_start.split()[0]).name if unit.exec_start else ""
        lines.append(f"   Main PID: {p['MainPID']} ({exe})")
        lines.append(f"     CGroup: /system.slice/{name}")
        lines.append(f"             └─{p['MainPID']} {unit.exec_start[:200]}")
    tail = _journal_lines(units, name)[-10:]
    text = "\n".join(lines) + "\n" + ("\n" + "".join(tail) if tail else "")
    return text, 0 if active == "active" else 3


def _journal_lines(units: CtUnits, name: str) -> list[str]:
    try:
        return units.journal(name).read_text().splitlines(keepends=True)
    except OSError:
        return []


def enable(units: CtUnits, name: str) -> str:
    if not units.unit_file(name).exists():
        raise CtlError(1, f"Failed to enable unit: Unit file {name} does not exist.\n")
    link = units.wants_link(name)
    if link.exists() or link.is_symlink():
        return ""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"/etc/systemd/system/{name}")
    return f"Created symlink /etc/systemd/system/multi-user.target.wants/{name} → /etc/systemd/system/{name}.\n"


def disable(units: CtUnits, name: str) -> str:
    link = units.wants_link(name)
    if link.exists() or link.is_symlink():
        link.unlink()
        return f"Removed \"/etc/systemd/system/multi-user.target.wants/{name}\".\n"
    return ""


def run(argv: list[str], units: CtUnits) -> int:
    args = [a for a in argv if a not in ("--no-pager", "--no-block", "-q", "--quiet", "--no-ask-password", "--full",
                                         "-l", "--system")]
    value_only = "--value" in args
    now = "--now" in args
    props: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-p", "--property"):
            props += args[i + 1].split(",") if i + 1 < len(args) else []
            i += 2
            continue
        if a.startswith("--property="):
            props += a.split("=", 1)[1].split(",")
        elif a.startswith("-p") and len(a) > 2:
            props += a[2:].split(",")
        elif a not in ("--value", "--now"):
            rest.append(a)
        i += 1
    if not rest:
        raise CtlError(1, "systemctl (sim): no command given\n")
    cmd, names = rest[0], [unit_name(n) for n in rest[1:]]
    out = sys.stdout
    if cmd == "daemon-reload":
        daemon_reload(units)
        return 0
    if cmd in ("start", "stop", "restart", "reload-or-restart", "try-restart", "reload") and not names:
        raise CtlError(1, "Too few arguments.\n")
    if cmd == "start":
        for n in names:
            start(units, n)
        return 0
    if cmd == "stop":
        for n in names:
            stop(units, n)
        return 0
    if cmd in ("restart", "reload-or-restart", "try-restart", "reload"):
        for n in names:
            if load(units, n) is None:
                raise CtlError(5, f"Failed to restart {n}: Unit {n} not found.\n")
            if cmd == "try-restart" and active_state(units, n).get("ActiveState") != "active":
                continue
            stop(units, n)
            start(units, n)
        return 0
    if cmd in ("enable", "disable"):
        for n in names:
            sys.stderr.write(enable(units, n) if cmd == "enable" else disable(units, n))
            if now:
                (start if cmd == "enable" else stop)(units, n)
        return 0
    if cmd == "is-active":
        states = [properties(units, n)["ActiveState"] for n in names]
        out.write("".join(s + "\n" for s in states))
        return 0 if states and all(s == "active" for s in states) else 3
    if cmd == "is-failed":
        states = [properties(units, n)["ActiveState"] for n in names]
        out.write("".join(s + "\n" for s in states))
        return 0 if "failed" in states else 1
    if cmd == "is-enabled":
        p = properties(units, names[0]) if names else {}
        state = p.get("UnitFileState") or "not-found"
        out.write(state + "\n")
        return 0 if state == "enabled" else 1
    if cmd == "status":
        text, code = status_text(units, names[0])
        out.write(text)
        return code
    if cmd == "show":
        p = properties(units, names[0]) if names else {}
        for key in props or list(PROPS):
            value = p.get(key, "")
            out.write(f"{value}\n" if value_only else f"{key}={value}\n")
        return 0
    if cmd == "cat":
        path = units.unit_file(names[0])
        if not path.exists():
            raise CtlError(1, f"No files found for {names[0]}.\n")
        out.write(f"# /etc/systemd/system/{names[0]}\n" + path.read_text())
        return 0
    if cmd == "reset-failed":
        for n in names:
            if units.read_state(n).get("ActiveState") == "failed":
                units.write_state(n, ActiveState="inactive", SubState="dead", NRestarts=0)
        return 0
    raise CtlError(1, f"Unknown command verb {cmd}.\n")


def main() -> int:
    try:
        return run(sys.argv[1:], CtUnits.from_env())
    except CtlError as e:
        sys.stderr.write(e.text)
        return e.code
    except ValueError as e:
        sys.stderr.write(f"systemctl (sim): {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
