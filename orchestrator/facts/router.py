"""The managed router's facts (`ROUTER.x`), read in the router's container in one round trip: the flags probe
(installed version, parser actions, argv verdict), the installed files' hashes, the unit's ExecStart and state.

Built as the server's facts are: each fact its command and its parser, one settled batch (`settled_batch`: never
read from a half-booted container), split and judged by the same code (`split_settled`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from orchestrator.facts.base import text
from orchestrator.facts.gather import BOOT_WAIT_S, settled_batch, split_settled
from orchestrator.inventory.models import RouterSpec
from orchestrator.parsers.sections import CommandOutput, new_nonce
from orchestrator.remote.container import Container, heredoc
from orchestrator.resources import flags_probe_source
from orchestrator.router.release import release_of
from orchestrator.router.render import KEY_PATH, LAUNCHER_PATH, UNIT_PATH, probe_command

T = TypeVar("T")
UNIT = "sglang-router"


@dataclass(frozen=True)
class RouterFact(Generic[T]):
    """A read in the router's container: its name in the batch, its command (from the router section and the argv
    the probe checks), the parser of its output."""

    name: str
    command: Callable[[RouterSpec, Sequence[str]], str]
    parse: Callable[[CommandOutput], T]


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
    return out.stdout.strip() or None


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


#: The installed files by name, as RouterFacts.file_sha keys them: (path, the fact of its hash).
FILE_SHA_FACTS: dict[str, tuple[str, RouterFact[str | None]]] = {
    "unit": (UNIT_PATH, ROUTER.sha_unit), "launcher": (LAUNCHER_PATH, ROUTER.sha_launcher),
    "key": (KEY_PATH, ROUTER.sha_key)}
ROUTER_FACTS: tuple[RouterFact[Any], ...] = (ROUTER.probe, ROUTER.sha_unit, ROUTER.sha_launcher, ROUTER.sha_key,
                                             ROUTER.execstart, ROUTER.active)


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


def facts_commands(spec: RouterSpec, argv: Sequence[str]) -> dict[str, str]:
    """The facts batch, by fact name."""
    return {f.name: f.command(spec, argv) for f in ROUTER_FACTS}


def parse_facts(outputs: Mapping[str, CommandOutput]) -> RouterFacts:
    """The value of the batch's outputs (a fact missing from them reads as if it printed nothing)."""
    def value(fact: RouterFact[T]) -> T:
        return fact.parse(outputs.get(fact.name) or CommandOutput(0, "", ""))

    return RouterFacts(probe=value(ROUTER.probe), file_sha={n: value(f) for n, (_, f) in FILE_SHA_FACTS.items()},
                       active=value(ROUTER.active), execstart=value(ROUTER.execstart))


def read_router_facts(ct: Container, spec: RouterSpec, argv: Sequence[str], *, host: str = "") -> RouterFacts:
    """One round trip in the router's container, once its boot has settled."""
    nonce = new_nonce()
    commands = facts_commands(spec, argv)
    res = ct.script(settled_batch(commands, nonce), check=False, timeout=BOOT_WAIT_S + 120, what="router facts")
    return parse_facts(split_settled(CommandOutput(res.rc, res.stdout, res.stderr), nonce, vmid=ct.vmid, host=host,
                                     expected=commands))
