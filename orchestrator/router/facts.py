"""The managed router's facts and what must change. Its facts (`ROUTER.x`) are read in the router's container in
one round trip, built as the server's are (orchestrator/facts: each its command and its parser; one settled batch,
never read from a half-booted container, split and judged by the same code): the flags probe (installed version,
parser actions, argv verdict), the installed files' hashes, the unit's ExecStart and state. The rest is pure: the
decisions (which files differ, whether the workers alone changed) and the apply script; converge.py runs them.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orchestrator.facts.base import RouterFact, of_stdout, outcome_if_ok, text
from orchestrator.facts.gather import BOOT_WAIT_S, settled_batch, split_settled
from orchestrator.flags import FlagSchema
from orchestrator.inventory.models import RouterSpec
from orchestrator.parsers.netaddr import parse_ip_addr
from orchestrator.remote.batch import CommandOutput, new_nonce
from orchestrator.remote.container import Container, heredoc
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
from orchestrator.router.staging import UNIT as UNIT  # the router's unit, named beside the staging unit
from orchestrator.router.staging import MigrationState, StopReport, UnitState, state_command
from orchestrator.scripts import render_script

T = TypeVar("T")


def probe_fact_command(spec: RouterSpec, argv: Sequence[str]) -> str:
    """The probe runs with the router venv's python, its source in a quoted heredoc (no venv: a JSON line that
    says so)."""
    python = f"{spec.venv.rstrip('/')}/bin/python"
    return (f"if [ -x {shlex.quote(python)} ]; then {probe_command(python, list(argv), release_of(spec))} "
            + heredoc(flags_probe_source(), "DEPLOY_PROBE_EOF").rstrip("\n")
            + f"\nelse echo '{json.dumps({'version': None, 'error': f'no venv at {spec.venv}'})}'; fi")


def _sha(path: str) -> Callable[[RouterSpec, Sequence[str]], str]:
    return lambda spec, argv: f"sha256sum {shlex.quote(path)} 2>/dev/null | cut -d' ' -f1"


def _digest(out: CommandOutput) -> str | None:
    """A file's sha256 (None: the file is missing)."""
    return text(out) or None


class ROUTER:
    """The router container's facts."""

    #: The flags probe's JSON output, stripped (installed version, parser actions, argv verdict).
    probe = RouterFact("probe", probe_fact_command, text)
    sha_unit = RouterFact("sha-unit", _sha(UNIT_PATH), _digest)
    sha_launcher = RouterFact("sha-launcher", _sha(LAUNCHER_PATH), _digest)
    sha_key = RouterFact("sha-key", _sha(KEY_PATH), _digest)
    #: The installed unit's ExecStart line (no secret: the key is never in it); "" without a unit.
    execstart = RouterFact("execstart", lambda spec, argv: (
        f"grep '^ExecStart=' {shlex.quote(UNIT_PATH)} 2>/dev/null || true"), text)
    active = RouterFact("active", lambda spec, argv: f"systemctl is-active {UNIT} 2>/dev/null || true",
                        lambda o: text(o) or "unknown")
    #: What an interrupted migration to smg left (staging unit, redirect table) and the running launcher's module.
    migration = RouterFact("migration", lambda spec, argv: state_command(), of_stdout(MigrationState.parse))



#: The reads of the router's layer outside its batch, each by its fixture folder (`tests/facts/READ.<name>/`):
#: the unit's state with the migration's facts (`deploy router status`), what a graceful stop reported, and a
#: container's address on the site network (the first global IPv4; None without one or when `ip` failed).
UNIT_STATE = of_stdout(UnitState.parse)
GRACEFUL_STOP = of_stdout(StopReport.parse)
ADDRESS = outcome_if_ok(parse_ip_addr)
ROUTER_READS: dict[str, Callable[[CommandOutput], Any]] = {
    "router_unit_state": UNIT_STATE, "graceful_stop": GRACEFUL_STOP, "ct_address": ADDRESS}

#: The installed files by name, as RouterFacts.file_sha keys them: (path, the fact of its hash).
FILE_SHA_FACTS: dict[str, tuple[str, RouterFact[str | None]]] = {
    "unit": (UNIT_PATH, ROUTER.sha_unit), "launcher": (LAUNCHER_PATH, ROUTER.sha_launcher),
    "key": (KEY_PATH, ROUTER.sha_key)}
ROUTER_FACTS: tuple[RouterFact[Any], ...] = (ROUTER.probe, ROUTER.sha_unit, ROUTER.sha_launcher, ROUTER.sha_key,
                                             ROUTER.execstart, ROUTER.active, ROUTER.migration)


@dataclass(frozen=True)
class RouterFacts:
    """What is installed in the router's container, read in one round trip."""

    probe: str  # the flags probe's JSON output (installed version, parser actions, argv verdict)
    file_sha: dict[str, str | None]
    active: str
    execstart: str = ""  # the installed unit's ExecStart line (no secret: the key is never in it)
    migration: MigrationState = field(default_factory=MigrationState)

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


def facts_commands(spec: RouterSpec, argv: Sequence[str]) -> dict[str, str]:
    """The facts batch, by fact name."""
    return {f.name: f.command(spec, argv) for f in ROUTER_FACTS}


def parse_facts(outputs: Mapping[str, CommandOutput]) -> RouterFacts:
    """The value of the batch's outputs (a fact missing from them reads as if it printed nothing)."""
    def value(fact: RouterFact[T]) -> T:
        return fact.parse(outputs.get(fact.name) or CommandOutput(0, "", ""))

    return RouterFacts(probe=value(ROUTER.probe), file_sha={n: value(f) for n, (_, f) in FILE_SHA_FACTS.items()},
                       active=value(ROUTER.active), execstart=value(ROUTER.execstart),
                       migration=value(ROUTER.migration))


def read_router_facts(ct: Container, spec: RouterSpec, argv: Sequence[str], *, host: str = "") -> RouterFacts:
    """One round trip in the router's container, once its boot has settled."""
    nonce = new_nonce()
    commands = facts_commands(spec, argv)
    res = ct.script(settled_batch(commands, nonce), check=False, timeout=BOOT_WAIT_S + 120, what="router facts")
    return parse_facts(split_settled(res.output, nonce, vmid=ct.vmid, host=host, expected=commands))


#: The installed files by name: path.
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


def apply_script(bundle: RouterBundle, *, action: str | None, unit: str = UNIT, enable: bool = True) -> str:
    """Write the files, daemon-reload, then `systemctl ACTION` (restart, start; None: leave the process be). A
    migration's staging unit is not enabled: it must not come back on its own after a reboot."""
    files = [{"path": f.remote_path, "mode": f.mode, "b64": base64.b64encode(f.content.encode()).decode()}
             for f in bundle.files]
    remove = [] if bundle.key_file is not None else [KEY_PATH]
    return render_script("router_apply.sh.j2", conf_dir=CONF_DIR, files=files, remove=remove, unit=unit,
                         action=action, enable=enable)
