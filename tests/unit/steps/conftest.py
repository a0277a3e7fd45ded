"""In-process step tests: recorded facts in, the commands and changes a step would make out.

No root, no sshd, no simulator. `FakeNode` is the one fake in the suite: a recording stand-in for the PVE node's
SSH adapter. Everything above it is real: the container adapter builds the `pct exec` commands, Facts splits the
framed batch output, steps decide. A test states the facts the step sees (as the batch would have returned them),
runs the step, and asserts the record (status, changes) and the commands sent to the node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.state import RunInputs
from orchestrator.engine.step import RunOptions, StepContext
from orchestrator.errors import RemoteError
from orchestrator.facts import CT_FACTS, HOST_FACTS, Facts
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Host, Inventory
from orchestrator.remote.batch import CommandOutput
from orchestrator.remote.container import Container
from orchestrator.remote.ssh import CommandGuard, RemoteResult
from orchestrator.render.boot_unit import SEPARATOR
from orchestrator.runlog import Metrics, StepRecord
from orchestrator.steps import REGISTRY, load_all_steps
from orchestrator.steps.container import cache_owner
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]

Fact = str | CommandOutput

#: The real RTX PRO 6000 power-limit query (tests/fixtures/nvidia-smi-pl/): the header and GPU 0 at its default.
DEFAULT_POWER_LIMITS = "\n".join((Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi-pl" / "query.csv")
                                 .read_text().splitlines()[:2]) + "\n"


#: The kernel cache directory with room to spare (what HOST.kernel_cache_usage prints; its shape is the real
#: output's, tests/facts/HOST.kernel_cache_usage/).
ROOMY_CACHE = ("path\t/var/lib/deploy/kernel-cache/120\n"
               "df\t/dev/mapper/pve-root ext4 100000000000 20000000000 80000000000 20% /\ndu\t4096\n")


def out(stdout: str = "", rc: int = 0, stderr: str = "") -> CommandOutput:
    return CommandOutput(rc, stdout, stderr)


def _as_output(value: Fact) -> CommandOutput:
    return value if isinstance(value, CommandOutput) else out(value)


def _known(facts: Mapping[str, object], name: str) -> str:
    """A fact name a test gives must be a real fact's (orchestrator.facts.HOST / CT): a typo fails the test."""
    assert name in facts, f"no fact named {name!r}; known: {', '.join(sorted(facts))}"
    return name


def frame(nonce: str, outputs: Mapping[str, CommandOutput]) -> str:
    """What a batch script prints for these outputs (the framing of orchestrator.remote.batch)."""
    parts = []
    for name, o in outputs.items():
        parts.append(f"@@DEPLOY:{nonce}:BEGIN:{name}@@\n{o.stdout}\n@@DEPLOY:{nonce}:STDERR:{name}@@\n"
                     f"{o.stderr}\n@@DEPLOY:{nonce}:END:{name}:{o.rc}@@\n")
    return "".join(parts)


def with_container(run: StepRun, **update: object) -> StepRun:
    """The same run on a host whose container section has these fields (as if the inventory said so)."""
    host = run.ctx.host
    run.ctx.host = host.model_copy(update={"container": host.container.model_copy(update=update)})
    return run


@dataclass
class Call:
    kind: str  # run | script | batch
    command: str
    what: str
    stdin: str | None = None  # what a `run` fed the command (a secret it reads)


@dataclass
class FakeNode:
    """Records every round trip; answers from rules (first matching substring, newest rule first).

A command no rule matches fails the test (AssertionError naming it): a test declares every answer its step needs,
so a new or changed remote command never passes unnoticed on an empty "success".

    Container facts re-read after a change come from `ct_after` (None: the container is not running).
    """

    host: Host
    metrics: Metrics = field(default_factory=Metrics)
    calls: list[Call] = field(default_factory=list)
    rules: list[tuple[str, RemoteResult]] = field(default_factory=list)
    ct_after: dict[str, Fact] | None = None
    #: Host facts a step reads again in a round trip of its own (answered by name; any other fails the test).
    host_after: dict[str, Fact] = field(default_factory=dict)
    #: What the container prints instead of its facts when a just-started boot does not settle (None: it settles).
    ct_boot_unsettled: str | None = None
    #: The host lease's guard and the connection count, as on SshHost (orchestrator.remote.container.Node).
    guard: CommandGuard | None = None
    generation: int = 0

    def answer(self, needle: str, stdout: str = "", rc: int = 0, stderr: str = "") -> None:
        self.rules.insert(0, (needle, RemoteResult(rc, stdout, stderr, 0.0)))

    def succeed(self, *needles: str) -> None:
        """Commands that contain any of these succeed with no output (a change the test expects to be made)."""
        for needle in needles:
            self.answer(needle)

    def _reply(self, kind: str, command: str, what: str, check: bool, stdin: str | None = None) -> RemoteResult:
        self.metrics.round_trip()
        self.calls.append(Call(kind, command, what, stdin))
        res = next((r for needle, r in self.rules if needle in command), None)
        if res is None:
            raise AssertionError(f"FakeNode has no answer for this {kind} ({what or 'no description'}); declare "
                                 f"one with node.answer(NEEDLE, stdout, rc=...):\n{command[:2000]}")
        if check and res.rc != 0:
            raise RemoteError(f"{what} failed with exit code {res.rc}", host=self.host.name)
        return res

    # -- the SshHost surface the steps use ------------------------------------------------------------
    def connect(self) -> None:
        return None

    def close(self) -> None:
        return None

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None, check: bool = True,
            what: str = "", progress: Callable[[str], None] | None = None,
            progress_every_s: float = 2.0, each_line: Callable[[str], None] | None = None) -> RemoteResult:
        return self._reply("run", command, what, check, stdin)

    def script(self, body: str, *, timeout: float | None = None, check: bool = True,
               what: str = "") -> RemoteResult:
        return self._reply("script", body, what, check)

    def batch(self, commands: Mapping[str, str], *, timeout: float | None = None,
              what: str = "fact gathering") -> dict[str, CommandOutput]:
        self.metrics.round_trip()
        self.calls.append(Call("batch", "\n".join(f"{k}: {v}" for k, v in commands.items()), what))
        unknown = [name for name in commands if name != "ct_facts" and name not in self.host_after]
        if unknown:
            raise AssertionError(f"FakeNode has no answer for the host facts {', '.join(unknown)} ({what}); give "
                                 "them to make_run, or to node.host_after if the step reads them again")
        result: dict[str, CommandOutput] = {name: _as_output(self.host_after[_known(HOST_FACTS, name)])
                                            for name in commands if name != "ct_facts"}
        if "ct_facts" in commands:
            if self.ct_after is None:
                result["ct_facts"] = out("__CT_NOT_RUNNING__\n")
            elif self.ct_boot_unsettled is not None and "is-system-running --wait" in commands["ct_facts"]:
                result["ct_facts"] = out(self.ct_boot_unsettled)
            else:
                m = re.search(r"@@DEPLOY:([A-Za-z0-9]+):PLAN:([a-z0-9_ -]*)@@", commands["ct_facts"])
                assert m, "the container facts must travel as one inner batch"
                names = m.group(2).split()
                for name in self.ct_after:
                    _known(CT_FACTS, name)
                result["ct_facts"] = out(frame(m.group(1), {n: _as_output(self.ct_after.get(n, out(rc=1)))
                                                             for n in names}))
            status = re.search(r"(@@DEPLOY:[A-Za-z0-9]+:PCT_STATUS@@)", commands["ct_facts"])
            if status:  # HOST.ct_status rides on the container command: its frame comes first
                st = _as_output(self.host_after[_known(HOST_FACTS, "ct_status")])
                mark = status.group(1)
                result["ct_facts"] = out(f"{mark} {st.rc}\n{st.stdout.rstrip(chr(10))}\n{mark}\n"
                                         + result["ct_facts"].stdout)
        return result

    # -- what the test asserts on ---------------------------------------------------------------------
    def commands(self, kind: str | None = None) -> list[str]:
        return [c.command for c in self.calls if kind is None or c.kind == kind]

    def sent(self, needle: str) -> bool:
        return any(needle in c.command for c in self.calls)


@dataclass
class StepRun:
    ctx: StepContext
    node: FakeNode

    def step(self, name: str) -> StepRecord:
        """Run the registered step `name` once, as the runner would."""
        record = StepRecord(name)
        self.ctx.records.append(record)
        REGISTRY[name].fn(self.ctx, record)
        return record


@pytest.fixture(scope="session")
def inventory() -> Inventory:
    inv = load_inventory(EXAMPLE_INVENTORY)
    # Lifecycle through pvesh as root (no token API): every PVE call is then a recorded node command.
    host = inv.hosts["pve-gpu-1"]
    host = host.model_copy(update={"pve": host.pve.model_copy(update={"api": None})})
    return inv.model_copy(update={"hosts": {**inv.hosts, "pve-gpu-1": host}})


@pytest.fixture
def make_run(inventory: Inventory) -> Callable[..., StepRun]:
    """A StepContext on the shipped host (CT 120) whose facts are the ones given; nothing is gathered again."""
    load_all_steps()

    def make(host_facts: Mapping[str, Fact] | None = None, ct_facts: Mapping[str, Fact] | None = None, *,
             dry_run: bool = False, inputs: RunInputs | None = None, **options: Any) -> StepRun:
        host = inventory.hosts["pve-gpu-1"]
        profile = inventory.profile_for(host)
        node = FakeNode(host)
        ct = Container(node, host.container.vmid)
        facts = Facts(node, host, profile, ct)
        # The kernel cache's host directory is there, owned by the CT's root, and the GPUs run at their default
        # power limit with no power unit, unless a test says otherwise.
        given = {"kernel_cache_dir": f"{cache_owner(host.container)}\n", "power_limits": DEFAULT_POWER_LIMITS,
                 "power_unit": f"\n{SEPARATOR}\n", "kernel_cache_usage": ROOMY_CACHE, **(host_facts or {})}
        facts.host = {_known(HOST_FACTS, k): _as_output(v) for k, v in given.items()}
        facts.ct = {_known(CT_FACTS, k): _as_output(v) for k, v in (ct_facts or {}).items()}
        facts.ct_running = ct_facts is not None
        facts.gathered = True
        ctx = StepContext(host=host, profile=profile, inventory=inventory, ssh=node,
                          metrics=node.metrics, facts=facts, options=RunOptions(dry_run=dry_run, **options), ct=ct,
                          say=lambda _msg: None, inputs=inputs or RunInputs())
        return StepRun(ctx, node)

    return make
