"""The simulated host's own systemd units: the `systemctl` stand-in of the host view and what a boot starts.

A PVE host runs systemd; the simulated host has none (its SSH sessions share this machine's PID 1, which must never
see a unit a test writes). So the host view binds `hosts/<name>/fs/etc/systemd/system` over /etc/systemd/system
(simulator/layout.py), and this stand-in does the few verbs an operator or `deploy` uses there: `daemon-reload`,
`enable [--now]`, `disable [--now]`, `is-enabled`, `start`, `restart` (runs a oneshot's `ExecStart=` again, as
doctor's power-limit fix asks), `is-active`, `cat`, and `reboot`: as on a real host it
queues the reboot and returns 0, and the node goes down a moment later (`deploy sim reboot`, made by a process
outside the view: SSH sessions drop, a new boot; `schedule_reboot`). Enabling makes the
`<target>.wants/` links of the unit's [Install] section, as systemctl does. `deploy sim reboot`
(simulator/host/reboot.py) starts the enabled units in systemd's order (`boot_order`): those ordered before
pve-guests.service (`Before=` it, or `After=`-ed by one that is) before the guests start, the others after, each after
the units it is `After=`. A unit's `ExecStart=` lines run in order through bash in the host view (a bare name is looked
up on PATH, as systemd resolves one in its fixed search path); the first that fails fails the unit (`-` prefix:
ignored).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: Inside the host view; the manager passes `hp.fs / "etc/systemd/system"` instead.
UNIT_DIR = Path("/etc/systemd/system")
#: Active oneshot units of the current boot (`RemainAfterExit=yes`), one name a line; cleared by a reboot.
ACTIVE_FILE = "deploy-sim-active"
GUESTS = "pve-guests.service"


@dataclass(frozen=True)
class Unit:
    """The parts of a unit file the simulated host acts on (pure: parsed from its text)."""

    name: str
    exec_start: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    wanted_by: tuple[str, ...] = ()
    required_by: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def before_guests(self) -> bool:
        return GUESTS in self.before


def parse_unit(name: str, text: str) -> Unit:
    """systemd's INI: sections, `Key=value`, repeated keys accumulate, `#`/`;` comments, trailing `\\` joins."""
    joined = text.replace("\\\n", " ")
    section = ""
    lists: dict[str, list[str]] = {"ExecStart": [], "Before": [], "After": [], "WantedBy": [], "RequiredBy": []}
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            continue
        if section == "Service" and key == "ExecStart":
            lists["ExecStart"].append(value)
        elif (section, key) in (("Unit", "Before"), ("Unit", "After"), ("Install", "WantedBy"),
                                ("Install", "RequiredBy")):
            lists[key].extend(value.split())
    return Unit(name, tuple(lists["ExecStart"]), tuple(lists["Before"]), tuple(lists["After"]),
                tuple(lists["WantedBy"]), tuple(lists["RequiredBy"]))


def _unit_name(arg: str) -> str:
    return arg if "." in arg else f"{arg}.service"


def load(unit_dir: Path, name: str) -> Unit | None:
    path = unit_dir / name
    return parse_unit(name, path.read_text()) if path.is_file() else None


def enabled_units(unit_dir: Path) -> list[Unit]:
    """Units linked from a `*.wants/` or `*.requires/` directory, by name (what a boot would pull in)."""
    names = sorted({link.name for d in unit_dir.glob("*.wants") for link in d.iterdir()}
                   | {link.name for d in unit_dir.glob("*.requires") for link in d.iterdir()}) \
        if unit_dir.is_dir() else []
    return [u for n in names if (u := load(unit_dir, n)) is not None]


def boot_order(units: list[Unit]) -> tuple[list[Unit], list[Unit]]:
    """(before pve-guests, after it), each in an order that honours `After=`/`Before=` between these units, as
    systemd's job ordering does: a unit that one before pve-guests is `After=` starts before the guests too (as
    nvidia-persistenced.service does for deploy-nvidia-nodes.service). Ties keep the name order."""
    names = {u.name: u for u in units}
    deps = {u.name: {a for a in u.after if a in names} for u in units}
    for u in units:
        for b in u.before:
            if b in deps:
                deps[b].add(u.name)
    early = {u.name for u in units if u.before_guests}
    grew = True
    while grew:
        more = {d for n in early for d in deps[n]} - early
        early |= more
        grew = bool(more)
    ordered: list[Unit] = []
    done: set[str] = set()

    def visit(name: str, path: frozenset[str]) -> None:
        if name in done or name in path:  # a cycle: systemd breaks it too (and logs it)
            return
        for dep in sorted(deps[name]):
            visit(dep, path | {name})
        done.add(name)
        ordered.append(names[name])

    for u in units:
        visit(u.name, frozenset())
    return [u for u in ordered if u.name in early], [u for u in ordered if u.name not in early]


def _links(unit: Unit) -> list[str]:
    return [f"{t}.wants" for t in unit.wanted_by] + [f"{t}.requires" for t in unit.required_by]


def enable(unit_dir: Path, unit: Unit) -> list[str]:
    """The [Install] links, as `systemctl enable` makes them; returns systemctl's `Created symlink` lines."""
    out = []
    for d in _links(unit):
        link = unit_dir / d / unit.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(UNIT_DIR / unit.name)
            out.append(f"Created symlink {UNIT_DIR / d / unit.name} → {UNIT_DIR / unit.name}.")
    return out


def disable(unit_dir: Path, name: str) -> list[str]:
    out = []
    for d in [*unit_dir.glob("*.wants"), *unit_dir.glob("*.requires")] if unit_dir.is_dir() else []:
        link = d / name
        if link.is_symlink():
            link.unlink()
            out.append(f"Removed \"{UNIT_DIR / d.name / name}\".")
    return out


def is_enabled(unit_dir: Path, name: str) -> str:
    """`enabled`, `disabled` (has [Install] but no link), `static` (none) or `` (no such unit)."""
    unit = load(unit_dir, name)
    if unit is None:
        return ""
    if any((unit_dir / d / name).is_symlink() for d in _links(unit)):
        return "enabled"
    return "disabled" if _links(unit) else "static"


def _active(unit_dir: Path) -> set[str]:
    path = unit_dir / ACTIVE_FILE
    return set(path.read_text().split()) if path.is_file() else set()


def clear_active(unit_dir: Path) -> None:
    """A reboot: no unit of the previous boot is active any more."""
    (unit_dir / ACTIVE_FILE).unlink(missing_ok=True)


def start(unit: Unit, unit_dir: Path) -> tuple[bool, str]:
    """Run the unit's ExecStart lines in order through bash (in the calling process's view); (ok, output)."""
    output = []
    for line in unit.exec_start:
        ignore = line.startswith("-")
        cmd = line.lstrip("-@+!:")
        res = subprocess.run(["/bin/bash", "-c", cmd], capture_output=True, text=True, timeout=120)
        output.append(res.stdout + res.stderr)
        if res.returncode != 0 and not ignore:
            return False, "".join(output) + f"{unit.name}: Main process exited, code=exited, status={res.returncode}\n"
    with open(unit_dir / ACTIVE_FILE, "a") as fh:
        fh.write(unit.name + "\n")
    return True, "".join(output)


#: How long after `systemctl reboot` returns the node goes down (systemd stops the session's sshd within moments).
REBOOT_DELAY_S = 1.0


def schedule_reboot() -> int:
    """`systemctl reboot`: start `deploy sim reboot` of this host in the simulator's real mount namespace, detached
    (`setsid -f`, a clean environment: the reboot kills this view's processes and must outlive them), and return
    at once, as systemctl returns once the job is queued. Its output goes to hosts/<name>/reboot.log."""
    import shlex

    from simulator import layout
    from simulator.layout import read_session
    from simulator.lxc.attach import mount_prefix

    host_dir = layout.current_host_dir()
    session = read_session(host_dir)
    python = (f"{session['venv_prefix']}/bin/python" if session.get("venv_prefix")
              else f"{session['python_prefix']}/bin/python3")
    real_dir = os.path.join(session["real_root"], "hosts", session["name"])
    cmd = (f"sleep {REBOOT_DELAY_S}; exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "
           f"PYTHONPATH={shlex.quote(session['repo'])} {shlex.quote(python)} -m simulator.manager "
           f"--root {shlex.quote(session['real_root'])} reboot {shlex.quote(session['name'])} "
           f">>{shlex.quote(real_dir + '/reboot.log')} 2>&1")
    res = subprocess.run([*mount_prefix(host_dir), "setsid", "-f", "/bin/sh", "-c", cmd],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         timeout=30)
    if res.returncode != 0:
        print(f"Failed to reboot system via logind: {res.stderr.strip()}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    """`systemctl VERB [--now] UNIT…` on the simulated host (inside the host view)."""
    args = [a for a in argv if not a.startswith("-")]
    now = "--now" in argv
    quiet = "-q" in argv or "--quiet" in argv
    if not args:
        print("deploy sim: the host's systemctl needs a verb", file=sys.stderr)
        return 1
    verb, names = args[0], [_unit_name(a) for a in args[1:]]
    if verb == "daemon-reload":
        return 0
    if verb == "reboot":
        return schedule_reboot()
    rc = 0
    for name in names:
        unit = load(UNIT_DIR, name)
        if verb in ("enable", "start", "restart", "cat") and unit is None:
            print(f"Failed to {verb} unit: Unit file {name} does not exist.", file=sys.stderr)
            return 1
        if verb == "enable" and unit is not None:
            for line in enable(UNIT_DIR, unit):
                print(line, file=sys.stderr)
        if verb == "disable":
            for line in disable(UNIT_DIR, name):
                print(line, file=sys.stderr)
        if verb == "is-enabled":
            state = is_enabled(UNIT_DIR, name)
            if not quiet:
                print(state or f"Failed to get unit file state for {name}: No such file or directory",
                      file=sys.stdout if state else sys.stderr)
            rc = rc or (0 if state == "enabled" else 1)
        elif verb == "is-active":
            state = "active" if name in _active(UNIT_DIR) else "inactive"
            if not quiet:
                print(state)
            rc = rc or (0 if state == "active" else 3)
        elif verb == "cat" and unit is not None:
            print(f"# {UNIT_DIR / name}\n{(UNIT_DIR / name).read_text()}", end="")
        elif (verb in ("start", "restart") or (now and verb == "enable")) and unit is not None:
            ok, text = start(unit, UNIT_DIR)
            sys.stderr.write(text)
            if not ok:
                print(f"Job for {name} failed because the control process exited with error code.",
                      file=sys.stderr)
                rc = 1
        elif verb not in ("enable", "disable", "is-enabled", "is-active", "cat", "start", "restart"):
            print(f"deploy sim: `systemctl {verb}` is not simulated on the host", file=sys.stderr)
            return 1
    return rc


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main(sys.argv[1:]))
