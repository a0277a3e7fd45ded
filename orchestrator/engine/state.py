"""Typed run state: what a command asks of its playbook (`RunInputs`) and what steps hand on (`RunState`).

One field per value, one dataclass per concern, so a reader (and mypy) can follow a flag from `roll --set` to the
unit file: `RollRequest.set` → `resolve_release` → `Candidate.new_flags` → `install_release` → the rendered bundle
in `ServerRun.bundle`. The command reads the same `RunState` back from the RunReport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.parsers.boot import BootStart

if TYPE_CHECKING:  # types only: the modules that produce them import the steps package themselves
    from orchestrator.bench.measured import MeasuredRun
    from orchestrator.bench.run import BenchRun
    from orchestrator.errors import DeployError
    from orchestrator.flags import FlagSet
    from orchestrator.gates.correctness import Verdict
    from orchestrator.gates.throughput import GateResult
    from orchestrator.hardware.power_limit import GpuPowerLimit
    from orchestrator.hardware.state import HardwareState
    from orchestrator.monitoring.events import Event
    from orchestrator.p2p.report import P2PReport
    from orchestrator.parsers.bench import BenchResult
    from orchestrator.parsers.hostfacts import PveVersion
    from orchestrator.parsers.leftovers import LeftoverBench
    from orchestrator.parsers.server_process import ServerProcess
    from orchestrator.releases.documents import ReleaseLine, ReleaseVerdict
    from orchestrator.render.bundle import Bundle
    from orchestrator.render.power_unit import PowerSetting
    from orchestrator.runlog import StepRecord
    from orchestrator.stacks.kernel_caches import CacheCheck
    from orchestrator.stacks.stack import StackRecord
    from orchestrator.verdicts.host import Finding
    from orchestrator.watchdog.parse import WatchdogStatus


# ------------------------------------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class TuneTrial:
    """The tune a roll is a trial point of: its release's meta.json names it, so `up` and `status` can tell a
    trial a killed tune left current from a release the operator kept."""

    tune_id: str
    original: str | None  # the release the tune restores when it ends

    def meta(self) -> dict[str, str | None]:
        return {"id": self.tune_id, "original": self.original}


@dataclass(frozen=True)
class ExpectedServer:
    """The server a tune's bench run must measure (bench step): its point's release, run by the process (pid) its
    earlier runs measured, with that release's flags. Anything else stops the run before it measures."""

    release: str
    pid: int | None = None  # None: the point's first run (it learns the pid)
    restarts: int | None = None  # systemd's NRestarts then: more now means the point's own server crashed


@dataclass(frozen=True)
class RollRequest:
    """`deploy roll` (and each point of `bench --sweep-server`): flag changes or a replacement flag set."""

    set: tuple[str, ...] = ()  # KEY=VALUE, as typed
    unset: tuple[str, ...] = ()
    replacement: dict[str, Any] | None = None  # --flags FILE or --profile NAME: the whole flag mapping
    accept_regression: bool = False
    threshold_pct: float | None = None  # None: the profile's regression_threshold_pct
    gate_metrics: tuple[str, ...] = ()  # empty: the profile's gate_metrics
    trial: TuneTrial | None = None  # a tune's point: the release is marked as its trial
    #: `roll --profile NAME`: the run is the host's under that profile, and its stack (sglang pin, extras, lock) is
    #: built beside the running server when it differs from the current release's (roll_stack, docs/roll.md).
    stack_profile: str | None = None


@dataclass(frozen=True)
class RunInputs:
    """What the command line asked for beyond RunOptions; each field is read by the step named beside it."""

    roll: RollRequest | None = None  # resolve_release, gate
    rollback_to: str | None = None  # rollback_release (None: the current release's predecessor)
    history_limit: int = 50  # history
    bench_points: tuple[dict[str, str], ...] = ({},)  # bench: one run per point (bench flag overrides)
    expect: ExpectedServer | None = None  # bench: measure only this server (a tune's run)
    want_bandwidth: bool = False  # p2p_bandwidth
    bandwidth_gate: bool = False  # p2p_bandwidth: a slow pair or a link below its capability fails the step
    probe_size_mib: int = 256  # p2p_bandwidth
    kernel_cursor: str | None = None  # hardware_cursor: the reading a GPU-fault remedy answered
    profile_steps: int | None = None  # bench: profile this many decode steps of each run (deploy bench --profile)
    power_limit: PowerSetting | None = None  # power_limit: the limit to set (None: the inventory's power_limit_w)


# ------------------------------------------------------------------------------------------------ state
@dataclass
class ServerRun:
    """The release the server runs now, as the steps of this run learnt or made it."""

    release: str | None = None
    bundle: Bundle | None = None  # what was rendered for it (flags included)
    restarted: bool = False  # this run (re)started sglang: health must wait, a verdict must be written
    installed: bool = False  # this run installed `release` (a new release id): its verdict must be written
    journal_cursor: str | None = None  # the unit's last journal entry before this start: health reads what follows
    boot: BootStart | None = None  # this run's last start, as the health wait read it from the journal (boot ledger)
    previous: str | None = None  # the release current before this run installed `release` (the gate's reference)
    measured: ServerProcess | None = None  # bench with RunInputs.expect: the server process it checked and measured
    cache: CacheCheck | None = None  # the kernel cache check before this run's last start (orchestrator/caches.py)


@dataclass(frozen=True)
class BaselineEvidence:
    """The run a roll's throughput gate compared with: a verdict is only as good as its baseline, so the gate
    shows its age, preset and release, and whether this roll measured it because the stored one would not do."""

    run_id: str | None
    release: str
    preset: str
    age_s: float | None  # None when the run id carries no time (an older deploy's run)
    remeasured: str = ""  # why this roll measured it ("" when a stored run was used)

    def describe(self) -> str:
        if self.remeasured:
            return (f"run {self.run_id} of release {self.release}, preset {self.preset}, measured by this roll "
                    f"({self.remeasured})")
        age = "age unknown" if self.age_s is None else f"{_age(self.age_s)} old"
        return f"run {self.run_id} of release {self.release}, preset {self.preset}, {age}"

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "release": self.release, "preset": self.preset,
                "age_s": None if self.age_s is None else round(self.age_s, 1), "remeasured": self.remeasured or None}


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Candidate:
    """A roll's new release: resolved and diffed by resolve_release, installed by install_release."""

    previous: str
    base_flags: FlagSet
    new_flags: FlagSet
    flag_diff: list[tuple[str, Any, Any]]
    baseline: BenchResult | None  # the newest plain run of the gate's preset on `previous`, young enough
    baseline_needed: bool = False  # no usable baseline: install_release measures `previous` first
    secret: frozenset[str] = frozenset()  # the secret flags of either set (render.service.secret_flags)
    baseline_evidence: BaselineEvidence | None = None  # which run `baseline` is, for the verdict and output
    baseline_missing: str = ""  # why there is no usable baseline (none of the preset, or too old)
    unit_diff: list[str] = field(default_factory=list)  # sglang.service now → the candidate's (a unified diff)

    def stored(self, flags: FlagSet) -> dict[str, Any]:
        """`flags` as evidence and output carry them: each secret's value replaced by its reference."""
        from orchestrator.flags import stored_flags  # at call time: this module is imported by the flags' users

        return stored_flags(flags, self.secret)


@dataclass(frozen=True)
class SmokeAnswer:
    """What the smoke check saw (steps/checks.py smoke): the served models, the answer, its latency and usage."""

    models: Any
    answer: Any
    latency_s: Any
    usage: Any

    def to_dict(self) -> dict[str, Any]:
        return {"models": self.models, "answer": self.answer, "latency_s": self.latency_s, "usage": self.usage}


@dataclass(frozen=True)
class CorrectnessRun:
    """The correctness gate's judgement of a release (steps/correctness.py), as `check` and the step report it."""

    verdict: Verdict
    notes: list[str]
    reference: str | None  # the release whose record it was compared with (None: detectors only)
    recorded: Any = None  # what the probe recorded (golden.json), when it wrote one
    seconds: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.verdict.to_dict(), "notes": self.notes, "reference": self.reference,
                "recorded": self.recorded, "seconds": self.seconds}


@dataclass(frozen=True)
class FlagDrift:
    """One flag the running release has differently from the inventory profile (None: not set on that side)."""

    flag: str
    profile: Any
    running: Any

    def describe(self) -> str:
        def shown(v: Any) -> str:
            return "(unset)" if v is None else str(v)
        return f"--{self.flag} {shown(self.running)} (profile: {shown(self.profile)})"

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "profile": self.profile, "running": self.running}


@dataclass
class ServerStatus:
    """`deploy status`: the container, the current release, the server and GPU power, read in one round trip."""

    container: str  # "running", "stopped", "absent"
    release: str | None = None
    active: str = "unknown"
    health: str | None = None
    release_created: str | None = None
    release_source: str | None = None
    verdict: str | None = None
    sglang_version: str | None = None
    #: The current release's stack (meta.json's `stack`: sha, venv, sglang_version, requirement); None for a release
    #: of an earlier deploy (it runs the profile's venv).
    stack: dict[str, Any] | None = None
    #: With a lock: where the running stack differs from it (stack_drift in orchestrator/steps/status.py).
    stack_drift: list[str] = field(default_factory=list)
    #: A file the running stack's patches changed, changed again (or removed) since the stack was built, by name.
    patch_drift: list[str] = field(default_factory=list)
    gpus: list[dict[str, float | int | None]] = field(default_factory=list)
    power_w: float = 0.0
    power_limit_w: float = 0.0
    drift: list[FlagDrift] = field(default_factory=list)
    #: The container's address on the site network (net0's static ip=, else read inside it): where the
    #: router and clients reach the server.
    address: str | None = None
    watchdog: WatchdogStatus | None = None  # the in-container watchdog's state file (None: container not running)
    tune_trial: str | None = None  # the tune whose trial point the current release is (steps/release.tune_trial)
    hardware: dict[str, Any] | None = None  # HardwareState.to_dict: each GPU's state, action and evidence
    #: The current release's boot ledger (boot.jsonl), newest last: each start's phases (orchestrator.parsers.boot).
    boots: list[BootStart] = field(default_factory=list)
    #: The current release's kernel cache as it is now (orchestrator/caches.py; None: no managed cache).
    kernel_cache: CacheCheck | None = None

    @property
    def last_boot(self) -> BootStart | None:
        return self.boots[-1] if self.boots else None

    @property
    def container_running(self) -> bool:
        return self.container == "running"

    @property
    def serving(self) -> bool:
        """sglang active and /health 200: a verdict says how a release did when judged, not that it serves now."""
        return self.active == "active" and self.health == "200"

    def release_line(self) -> str:
        """`release R (kept, up, T), sglang active, /health 200`; a release that is down now never reads as
        `(kept, up)`: its verdict is named as the past, and NOT SERVING comes first."""
        verdict, source = self.verdict or "unverified", self.release_source or "-"
        tail = f"sglang {self.active}, /health {self.health}"
        if self.serving:
            return f"release {self.release or 'none'} ({verdict}, {source}, {self.release_created or '-'}), {tail}"
        return (f"release {self.release or 'none'} is NOT SERVING ({tail}); its verdict was {verdict} "
                f"(installed by {source} at {self.release_created or '-'})")

    def to_dict(self) -> dict[str, Any]:
        return {"container": self.container, "container_running": self.container_running, "release": self.release,
                "active": self.active, "health": self.health, "release_created": self.release_created,
                "release_source": self.release_source, "verdict": self.verdict,
                "sglang_version": self.sglang_version, "stack": self.stack,
                "stack_drift": self.stack_drift, "patch_drift": self.patch_drift, "gpus": self.gpus,
                "power_w": self.power_w, "power_limit_w": self.power_limit_w,
                "drift": [d.to_dict() for d in self.drift],
                "address": self.address, "watchdog": None if self.watchdog is None else self.watchdog.to_dict(),
                "tune_trial": self.tune_trial, "hardware": self.hardware, "serving": self.serving,
                "boot": None if self.last_boot is None else self.last_boot.model_dump(mode="json"),
                "boots": [b.model_dump(mode="json") for b in self.boots],
                "kernel_cache": None if self.kernel_cache is None else self.kernel_cache.model_dump(mode="json")}


@dataclass(frozen=True)
class Rollback:
    """A failed roll's automatic rollback that finished: `to` is current again and healthy, `candidate` is not.
    `reason`: the failed step's (a gate's declared `GateSpec.rollback_reason`, else its name), "interrupted" (an
    interrupted roll's candidate restored) or "manual" (rollback)."""

    to: str
    candidate: str
    reason: str = ""


@dataclass(frozen=True)
class CurrentFlags:
    """The host already runs the flags a roll asked for (the roll is refused: there is nothing to roll)."""

    release: str
    flags: dict[str, Any]


#: Undo of a started rollout: called with the error and the failed step's record, before the error propagates.
FailureHandler = Callable[["DeployError", "StepRecord"], None]


@dataclass
class RunState:
    """Everything steps hand to later steps, and the command reads back from the RunReport."""

    server: ServerRun = field(default_factory=ServerRun)
    candidate: Candidate | None = None
    bench_run: BenchRun | None = None  # throughput: the gate's candidate figures
    bench_runs: list[BenchRun] = field(default_factory=list)  # bench: one per point
    #: Every bench run of this run, in order, for the ledger that the command writes after the run.
    measured: list[MeasuredRun] = field(default_factory=list)
    gate: GateResult | None = None
    correctness: CorrectnessRun | None = None  # the correctness gate's last judgement in this run
    smoke: SmokeAnswer | None = None  # the smoke check's last answer in this run
    pve_version: PveVersion | None = None
    p2p_report: P2PReport | None = None
    bandwidth: dict[str, Any] | None = None
    doctor_findings: list[Finding] = field(default_factory=list)
    #: The GPUs' hardware state read on the host (doctor, host_prereqs, status): orchestrator/hardware/state.py.
    hardware: HardwareState | None = None
    status: ServerStatus | None = None
    history: list[ReleaseLine] = field(default_factory=list)  # the release lines the target stores
    watchdog: WatchdogStatus | None = None  # history: the watchdog's state file, its restarts among the actions
    stopped_benches: list[LeftoverBench] = field(default_factory=list)  # benches of dead runs this run stopped
    rollback: Rollback | None = None  # install_release's undo, once it rolled back and verified
    already_on: CurrentFlags | None = None  # resolve_release: the requested flags are the current release's
    rolled_back: list[Rollback] = field(default_factory=list)  # every release this run left by a rollback (metrics)
    events: list[Event] = field(default_factory=list)  # what the run's end posts to notify: (monitoring/events.py)
    verdicts: dict[str, ReleaseVerdict] = field(default_factory=dict)  # release → the verdict this run recorded
    #: sglang_install: the software stack the profile names, built or adopted (orchestrator/stacks.py); a release
    #: installed by this run runs it.
    stack: StackRecord | None = None
    #: power_limit: each GPU's limits as read back after the step (hardware/power_limit.py), and the unit's record.
    power_limits: list[GpuPowerLimit] = field(default_factory=list)
    power_recorded: PowerSetting | None = None
    lock_text: str | None = None  # stack_lock: the lock file `deploy lock` writes into the inventory
