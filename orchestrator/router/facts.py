"""What must change for the managed router, and the apply script. Pure: the decisions (which files differ,
whether the workers alone changed) from its facts (orchestrator/facts/router.py: what is installed, read in one
round trip); converge.py runs them.
"""

from __future__ import annotations

import base64

from orchestrator.facts.router import FILE_SHA_FACTS, UNIT, RouterFacts, facts_commands, parse_facts
from orchestrator.flags import FlagSchema
from orchestrator.inventory.models import RouterSpec
from orchestrator.router.render import (
    CONF_DIR,
    KEY_PATH,
    UNIT_PATH,
    RouterBundle,
    render_router,
)
from orchestrator.scripts import render_script

__all__ = ["FILE_FACTS", "UNIT", "RouterFacts", "apply_script", "changed_files", "facts_commands", "installed_workers",
           "parse_facts", "workers_only_change"]

#: The installed files by name: path (their hashes are facts.router's FILE_SHA_FACTS).
FILE_FACTS = {name: path for name, (path, _) in FILE_SHA_FACTS.items()}


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
