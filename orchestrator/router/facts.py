"""What is installed for the managed router, read in one round trip, and what must change. Pure: commands to
run, their output parsed, the decisions (which files differ, whether the workers alone changed) and the apply
script; converge.py runs them.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from typing import Any

from orchestrator.flags import FlagSchema
from orchestrator.inventory.models import RouterSpec
from orchestrator.parsers.sections import CommandOutput
from orchestrator.remote.container import heredoc
from orchestrator.resources import flags_probe_source
from orchestrator.router.release import release_of
from orchestrator.router.render import (
    CONF_DIR,
    KEY_PATH,
    LAUNCHER_PATH,
    UNIT_PATH,
    RouterBundle,
    probe_command,
    render_router,
)
from orchestrator.scripts import render_script

UNIT = "sglang-router"


@dataclass(frozen=True)
class RouterFacts:
    """What is installed in the router's container, read in one round trip."""

    probe: str  # the flags probe's JSON output (installed version, parser actions, argv verdict)
    file_sha: dict[str, str | None]
    active: str
    execstart: str = ""  # the installed unit's ExecStart line (no secret: the key is never in it)

    def probe_doc(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.probe.strip().splitlines()[-1]) if self.probe.strip() else {}
        except json.JSONDecodeError:
            doc = {}
        return doc if isinstance(doc, dict) else {}

    @property
    def version(self) -> str | None:
        v = self.probe_doc().get("version")
        return str(v) if v else None


FILE_FACTS = {"unit": UNIT_PATH, "launcher": LAUNCHER_PATH, "key": KEY_PATH}


def facts_commands(spec: RouterSpec, argv: list[str]) -> dict[str, str]:
    """The facts batch: the probe runs with the router venv's python, its source in a quoted heredoc."""
    python = f"{spec.venv.rstrip('/')}/bin/python"
    probe = (f"if [ -x {shlex.quote(python)} ]; then {probe_command(python, argv, release_of(spec))} "
             + heredoc(flags_probe_source(), "DEPLOY_PROBE_EOF").rstrip("\n")
             + f"\nelse echo '{json.dumps({'version': None, 'error': f'no venv at {spec.venv}'})}'; fi")
    commands = {"probe": probe}
    for name, path in FILE_FACTS.items():
        commands[f"sha-{name}"] = f"sha256sum {shlex.quote(path)} 2>/dev/null | cut -d' ' -f1"
    commands["execstart"] = f"grep '^ExecStart=' {shlex.quote(UNIT_PATH)} 2>/dev/null || true"
    commands["active"] = f"systemctl is-active {UNIT} 2>/dev/null || true"
    return commands


def parse_facts(outputs: dict[str, CommandOutput]) -> RouterFacts:
    def text(name: str) -> str:
        out = outputs.get(name)
        return out.stdout.strip() if out is not None else ""

    return RouterFacts(probe=text("probe"),
                       file_sha={n: (text(f"sha-{n}") or None) for n in FILE_FACTS},
                       active=text("active") or "unknown", execstart=text("execstart"))


def installed_workers(execstart: str) -> list[str] | None:
    """The worker URLs in an installed ExecStart line (the words after --worker-urls); None without the line."""
    if not execstart.startswith("ExecStart="):
        return None
    words = execstart.split()
    if "--worker-urls" not in words:
        return []
    out = []
    for word in words[words.index("--worker-urls") + 1:]:
        if word.startswith("--"):
            break
        out.append(word)
    return out


def workers_only_change(spec: RouterSpec, schema: FlagSchema, facts: RouterFacts, bundle: RouterBundle,
                        urls: list[str], api_key: str | None) -> tuple[list[str], list[str]] | None:
    """(to add, to remove) when the running router differs from the rendered one in its worker set alone: then
    the worker API changes it live and nothing restarts (a restart would drop every request in flight). The test:
    re-rendered with the installed workers, the unit is byte for byte the installed one."""
    if facts.active != "active" or changed_files(bundle, facts) != [UNIT_PATH]:
        return None
    have = installed_workers(facts.execstart)
    if have is None or render_router(spec, schema, have, api_key).unit.sha256 != facts.file_sha.get("unit"):
        return None
    return [u for u in urls if u not in have], [u for u in have if u not in urls]


def changed_files(bundle: RouterBundle, facts: RouterFacts) -> list[str]:
    """Paths whose installed content differs from the rendered one (a key file that must go counts too)."""
    want = {"unit": bundle.unit, "launcher": bundle.launcher, "key": bundle.key_file}
    out = []
    for name, path in FILE_FACTS.items():
        f = want[name]
        if (f.sha256 if f is not None else None) != facts.file_sha.get(name):
            out.append(path)
    return out


def apply_script(bundle: RouterBundle, *, action: str | None) -> str:
    """Write the files, daemon-reload, then `systemctl ACTION` (restart, start; None: leave the process be)."""
    files = [{"path": f.remote_path, "mode": f.mode, "b64": base64.b64encode(f.content.encode()).decode()}
             for f in bundle.files]
    remove = [] if bundle.key_file is not None else [KEY_PATH]
    return render_script("router_apply.sh.j2", conf_dir=CONF_DIR, files=files, remove=remove, unit=UNIT,
                         action=action)
