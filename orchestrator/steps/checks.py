"""Health, smoke and throughput checks against the running server, all executed inside the container."""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.bench.measured import MeasuredRun
from orchestrator.bench.stats import estimate, median_index
from orchestrator.engine.state import ExpectedServer, SmokeAnswer
from orchestrator.engine.step import GateSpec, StepContext, step
from orchestrator.engine.waiting import waiting_for
from orchestrator.errors import CheckFailed, HostChanged, RemoteError
from orchestrator.facts import CT, health_code_command
from orchestrator.facts.reads import GPU_XIDS
from orchestrator.layout import PATHS
from orchestrator.parsers.boot import KEEP_STARTS, BootStart, parse_boot, parse_systemd_time
from orchestrator.parsers.server_process import ServerProcess, argv_difference, parse_server_process
from orchestrator.releases.store import record_boot_script
from orchestrator.remote.container import node_read
from orchestrator.render.service import public_flags
from orchestrator.resources import probe_text
from orchestrator.runlog import StepRecord
from orchestrator.steps.session import ensure_facts, refresh_ct_facts
from orchestrator.verdicts.server_log import CapturePhase, FatalLine, argparse_error, find_fatal

if TYPE_CHECKING:  # the bench and its ledger load when a bench runs, not in every run (tests/perf/client_cost.py)
    from orchestrator.bench.run import BenchRun
    from orchestrator.ledger.sqlite import RunSource
    from orchestrator.profile.moved import ShareMove

JOURNAL_TAIL = 40
XID_MARGIN_S = 60  # the host's kernel log is read from this long before the wait began
XID_TAIL = 20


@dataclass
class HealthProbe:
    code: str
    active: str
    restarts: int
    sub: str = ""
    new_lines: list[str] = field(default_factory=list)
    cursor: str | None = None  # the journal position after `new_lines`: the next probe reads only what follows
    main_started: str = ""  # systemd's ExecMainStartTimestamp: the imports before sglang's first line count from it


def journal_after(unit: str, cursor: str | None) -> str:
    """The unit's journal of this start, then `-- cursor: …` for the last entry shown.

    With a cursor (taken just before this run started the unit): the entries after it. Without one (the unit had
    no entry before, or systemd started it, e.g. at boot): the entries since its main process started
    (ExecMainStartTimestamp), so lines of an earlier start before a reboot are never read. `-q` drops
    "-- No entries --" and "-- Boot … --" lines.
    """
    q = shlex.quote(unit)
    base = f"journalctl -u {q} --no-pager -q -o cat --show-cursor"
    if cursor:
        return f"{base} --after-cursor={shlex.quote(cursor)}"
    return (f"__t=$(systemctl show -p ExecMainStartTimestamp --value {q} 2>/dev/null); "
            f"{base} ${{__t:+--since=\"$__t\"}}")


def split_cursor(lines: list[str]) -> tuple[list[str], str | None]:
    """(log lines, cursor) from `journalctl --show-cursor` output: the cursor is its last line, when present."""
    if lines and lines[-1].startswith("-- cursor: "):
        return lines[:-1], lines[-1][len("-- cursor: "):].strip() or None
    return lines, None


def probe_shell(ctx: StepContext, cursor: str | None) -> str:
    """/health code, the unit's state and the journal after `cursor`, in one container command."""
    p = ctx.profile
    unit = shlex.quote(ctx.ct.paths.unit_name)
    return (f"printf 'code=%s\\n' \"$({health_code_command(p)})\"; "
            f"systemctl show -p ActiveState -p SubState -p NRestarts -p ExecMainStartTimestamp {unit}; "
            "echo '--journal--'; "
            f"{journal_after(ctx.ct.paths.unit_name, cursor)}")


def parse_health_probe(stdout: str) -> HealthProbe:
    head, _, journal = stdout.partition("--journal--\n")
    values = dict(line.split("=", 1) for line in head.splitlines() if "=" in line)
    lines, cursor = split_cursor(journal.splitlines())
    return HealthProbe(code=values.get("code", "000"), active=values.get("ActiveState", "unknown"),
                       restarts=int(values.get("NRestarts", "0") or 0), sub=values.get("SubState", ""),
                       new_lines=[ln for ln in lines if ln.strip()], cursor=cursor,
                       main_started=values.get("ExecMainStartTimestamp", ""))


def probe_health(ctx: StepContext, cursor: str | None) -> HealthProbe:
    return ctx.ct.read(probe_shell(ctx, cursor), parse_health_probe, timeout=ctx.profile.health_probe_timeout_s + 35,
                       what="health probe")


def fatal_failure(ctx: StepContext, fatal: FatalLine, journal: list[str]) -> CheckFailed:
    """The failure a known fatal line makes: the line quoted, what it means, its fix, and its verdict code."""
    return CheckFailed(f"sglang logged a fatal line: {fatal.line!r} — {fatal.meaning}", fix=fatal.fix,
                       host=ctx.host.name, details={"journal": journal[-JOURNAL_TAIL:], "code": fatal.code})


def capture_stuck_failure(ctx: StepContext, phase: CapturePhase, journal: list[str], waited_s: float) -> CheckFailed:
    stuck = phase.stuck()
    assert stuck is not None
    return CheckFailed(f"CUDA-graph capture never ended within {waited_s:.0f} s (last capture line: {stuck.line!r})"
                       f" — {stuck.meaning}", fix=stuck.fix, host=ctx.host.name,
                       details={"journal": journal[-JOURNAL_TAIL:], "code": stuck.code})


def host_xid_shell(since_s: float) -> str:
    """The NVIDIA driver's Xid lines of the host's kernel log (not visible in the container) of the last seconds."""
    return (f"journalctl -k -q --no-pager -o short-iso --since=-{int(since_s) + XID_MARGIN_S}s 2>/dev/null "
            f"| grep -F 'NVRM: Xid' | tail -n {XID_TAIL}")


def add_host_xids(ctx: StepContext, err: CheckFailed, since_s: float) -> None:
    """After a failed health wait, one read of the host's kernel log: a GPU Xid there is often the real cause of
    an illegal memory access, an NCCL timeout or a hung capture. Names the last one in `err`; never fails."""
    try:
        xids = node_read(ctx.ssh, host_xid_shell(since_s), GPU_XIDS, timeout=30,
                         what="host kernel log (Xid lines)")
    except RemoteError:
        return
    if xids:
        err.what += f"; the host's kernel log has {len(xids)} Xid line(s), the last: {xids[-1].meaning}"
        err.details["host_xids"] = [x.line for x in xids]


#: How long the health wait gives journald to store a dead server's last lines before it reads them once more.
JOURNAL_SETTLE_S = 0.5


def wait_healthy(ctx: StepContext, record: StepRecord, *, timeout_s: float | None = None) -> float:
    """Poll /health until 200; fatal log lines or a dead unit end the wait at once. Returns seconds waited.

    A CUDA-graph capture that began and did not end is not a line but an absence: when the wait runs out while a
    rank is still capturing, or capture has run longer than the step option `capture_timeout_s`, the failure is
    the `capture-stuck` verdict instead of a plain timeout.
    """
    timeout = float(timeout_s or ctx.step_options.get("timeout_s") or ctx.profile.start_timeout_s)
    capture_bound = ctx.step_options.get("capture_timeout_s")
    interval = 2.0 if timeout <= 120 else 5.0
    # Only this start's entries count: the wait begins at the cursor taken just before the start, and each probe
    # moves it on, so an old fatal line never fails a later, healthy start and no line is read twice.
    cursor: list[str | None] = [ctx.state.server.journal_cursor]
    seen: list[str] = []
    start = time.monotonic()
    restarts_at_start: list[int] = []
    phase = CapturePhase()
    capture_since: list[float] = []  # when this wait first saw a rank capturing, while one still is
    main_started: list[str] = [""]

    def read(probe: HealthProbe) -> None:
        """Take a probe's new journal lines; a fatal one ends the wait at once, quoted."""
        if probe.cursor is not None:
            cursor[0] = probe.cursor
        main_started[0] = probe.main_started or main_started[0]
        for line in probe.new_lines[-5:]:
            ctx.say(f"  journal: {line}")
        seen.extend(probe.new_lines)
        fatal = find_fatal(probe.new_lines, phase)
        if fatal is not None:
            raise fatal_failure(ctx, fatal, seen)

    def attempt() -> HealthProbe | None:
        probe = probe_health(ctx, cursor[0])
        if not restarts_at_start:
            restarts_at_start.append(probe.restarts)
        read(probe)
        if not phase.capturing:
            capture_since.clear()
        elif not capture_since:
            capture_since.append(time.monotonic())
        elif capture_bound and time.monotonic() - capture_since[0] > float(capture_bound):
            raise capture_stuck_failure(ctx, phase, seen, time.monotonic() - capture_since[0])
        # auto-restart: the process died and systemd waits RestartSec before the next start; it is dead now.
        if (probe.active in ("failed", "inactive") or probe.sub == "auto-restart"
                or probe.restarts > restarts_at_start[0]):
            # journald may store a dying process's last lines after systemd saw it exit: read once more, so the
            # line that says why (NaN, an illegal memory access) is quoted instead of a bare "exited".
            time.sleep(JOURNAL_SETTLE_S)
            read(probe_health(ctx, cursor[0]))
            bad_flag = argparse_error(seen)
            raise CheckFailed(
                f"sglang exited ({probe.active}/{probe.sub or '?'}, restarts {probe.restarts}) before turning healthy"
                + (f": {bad_flag}" if bad_flag else ""),
                fix="read the journal excerpt; fix the flags or roll back (deploy rollback)", host=ctx.host.name,
                details={"journal": seen[-JOURNAL_TAIL:]})
        return probe if probe.code == "200" else None

    # The first probes come quickly (a restart of a small or cached model is healthy within a second or two), then
    # settle at `interval`: a probe is one round trip, and a GLM-5 load takes minutes either way.
    from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential  # waits only

    retrying = Retrying(stop=stop_after_delay(timeout), wait=wait_exponential(multiplier=0.25, min=0.5, max=interval),
                        retry=retry_if_result(lambda r: r is None))
    try:
        try:
            with waiting_for(ctx.say, "sglang to answer /health with 200", timeout):
                retrying(attempt)
        except RetryError as exc:
            if phase.capturing:
                raise capture_stuck_failure(ctx, phase, seen, time.monotonic() - capture_since[0]) from exc
            raise CheckFailed(f"sglang did not turn healthy within {timeout:.0f} s (/health never returned 200)",
                              fix="check the journal excerpt; raise start_timeout_s if the model needs longer",
                              host=ctx.host.name, details={"journal": seen[-JOURNAL_TAIL:]}) from exc
    except CheckFailed as err:
        add_host_xids(ctx, err, time.monotonic() - start)
        raise
    record.details["journal_tail"] = seen[-10:]
    record_boot(ctx, record, seen, parse_systemd_time(main_started[0]))
    return time.monotonic() - start


def record_boot(ctx: StepContext, record: StepRecord, journal: list[str],
                launched_at: datetime | None = None) -> BootStart | None:
    """The boot ledger: this start's phases from the lines the health wait read, appended to the current release's
    boot.jsonl (one small write; the wait runs only after a start, so a converged `up` reads and writes nothing).
    Never fails the run: a ledger that cannot be written is said and skipped."""
    boot = parse_boot(journal, healthy=True, launched_at=launched_at)
    if boot is None:
        return None
    check = ctx.state.server.cache
    boot = boot.judged(check, ctx.facts.find(CT.current_boot) or [])
    if check is not None:  # --json says what the check before this start did, in the words the output used
        record.details["kernel_cache"] = {**check.model_dump(mode="json"), "line": check.line()}
    ctx.state.server.boot = boot
    record.details["boot"] = boot.model_dump(mode="json")
    ctx.say(f"boot ledger: {boot.summary()}")
    try:
        res = ctx.ct.script(record_boot_script(boot.model_dump_json(), KEEP_STARTS), check=False, timeout=60,
                            what="record the boot ledger")
    except RemoteError as exc:
        ctx.say(f"boot ledger not recorded: {exc.what}")
        return boot
    if res.rc != 0:
        ctx.say(f"boot ledger not recorded: {res.said(200) or f'exit code {res.rc}'}")
    return boot


@step("health", ct_facts=(CT.health, CT.active, CT.current_boot), gate=GateSpec(serving=True))
def health(ctx: StepContext, record: StepRecord) -> None:
    """Wait for /health 200 (journal excerpts while waiting; fatal lines end the wait at once)."""
    ensure_facts(ctx)
    if ctx.options.dry_run:
        record.status = "skipped"
        record.summary = "dry run"
        return
    if not ctx.state.server.restarted and ctx.facts.get(CT.health) == "200":
        record.summary = "healthy (/health 200)"
        return
    waited = wait_healthy(ctx, record)
    record.summary = f"healthy after {waited:.1f} s"


def raise_if_fatal_logged(ctx: StepContext) -> None:
    """After a failed check, read the journal once: a known fatal line explains the failure better."""
    lines, _ = ctx.ct.read(f"{journal_after(ctx.ct.paths.unit_name, ctx.state.server.journal_cursor)} | tail -n 201",
                           lambda text: split_cursor(text.splitlines()), timeout=60, what="journal excerpt")
    fatal = find_fatal(lines)
    if fatal is not None:
        raise fatal_failure(ctx, fatal, lines)


def smoke_source() -> str:
    """The smoke probe after the tool's own redaction module (orchestrator/redact.py: pure, imports nothing of the
    tool): the probe stores /server_info in the release after `redact()`, the one rule every output goes through,
    at every depth. Why: the real server's `internal_states[…]` is the whole `vars(server_args)` per DP rank, with
    `api_key`, `admin_api_key` and `ssl_keyfile_password` (issue 50, 3a); the probe's own copy of a rule missed them."""
    from pathlib import Path

    from orchestrator import redact

    return Path(redact.__file__).read_text(encoding="utf-8") + "\n\n" + probe_text("smoke_probe.py")


def run_smoke(ctx: StepContext, release: str | None) -> dict[str, Any]:
    """One round trip: /v1/models, a deterministic chat completion, /server_info saved into the release."""
    p = ctx.profile
    args = {"base": f"http://{p.host}:{p.port}", "model": p.served_model_name, "prompt": p.smoke.prompt,
            "max_tokens": p.smoke.max_tokens, "timeout": p.smoke.timeout_s,
            "server_info_path": f"{ctx.ct.paths.release_dir(release)}/server_info.json" if release else ""}
    with waiting_for(ctx.say, "the smoke chat completion", p.smoke.timeout_s + 30):
        res = ctx.ct.run_python(p.venv, smoke_source(), [json.dumps(args)], tag="DEPLOY_SMOKE_EOF",
                                timeout=p.smoke.timeout_s + 30, what="smoke check")
    try:
        return dict(json.loads(res.last_line))
    except (json.JSONDecodeError, IndexError) as exc:
        raise RemoteError(f"smoke check printed no result: {res.said(300)}",
                          host=ctx.host.name) from exc


def judge_smoke(ctx: StepContext, data: dict[str, Any]) -> list[str]:
    """Problems found in a smoke result (empty list = pass)."""
    problems = []
    if data.get("error"):
        problems.append(str(data["error"]))
    if ctx.profile.served_model_name not in data.get("models", []):
        problems.append(f"/v1/models lists {data.get('models')} without {ctx.profile.served_model_name!r}")
    answer = str(data.get("answer", ""))
    if not re.search(ctx.profile.smoke.expect_regex, answer):
        problems.append(f"answer {answer[:120]!r} does not match {ctx.profile.smoke.expect_regex!r}")
    return problems


@step("smoke", gate=GateSpec(serving=True))
def smoke(ctx: StepContext, record: StepRecord) -> None:
    """A real chat completion with a checked answer, and /v1/models lists the served name."""
    if ctx.options.dry_run:
        record.status = "skipped"
        record.summary = "dry run"
        return
    data = run_smoke(ctx, ctx.state.server.release)
    ctx.state.smoke = SmokeAnswer(data.get("models"), data.get("answer"), data.get("latency_s"), data.get("usage"))
    record.details.update(ctx.state.smoke.to_dict())
    problems = judge_smoke(ctx, data)
    if problems:
        raise_if_fatal_logged(ctx)
        raise CheckFailed("smoke check failed: " + "; ".join(problems),
                          fix="look at the server journal (journalctl -u sglang in the container); roll back if "
                              "a flag change caused it", host=ctx.host.name, details=data)
    record.summary = f"answer {str(data.get('answer')).strip()[:40]!r} in {data.get('latency_s', 0):.2f} s"


def last_boot(ctx: StepContext) -> BootStart | None:
    """The server's last start: this run's (the health wait read it), else the last of the current release's boot
    ledger, which every step that benches reads (ct_facts of throughput and bench): the first and the second run of
    one release then judge the same start and name the same lever. None when neither has one."""
    if ctx.state.server.boot is not None:
        return ctx.state.server.boot
    boots = ctx.facts.find(CT.current_boot)
    return boots[-1] if boots else None


def bench_for_release(ctx: StepContext, preset_name: str, release: str | None,
                      overrides: dict[str, str] | None = None, *, judged: bool = False) -> BenchRun:
    """Run the preset with telemetry and return the BenchRun; it joins the run's measured runs (RunState.measured),
    which the command files in the ledger once the run has ended (commands/filing.py), never this step: a gate
    after it may still reject it. `judged`: the gates from this step on judge the run (the throughput gate's)."""
    from orchestrator.bench.run import bench_limit_s, run_bench

    preset = ctx.inventory.preset(preset_name)
    nvlink = False
    report = ctx.state.p2p_report
    if report is not None and report.container.topo:
        nvlink = any(str(link).startswith("NV") for link in report.container.topo.cells.values())
    flags = dict(ctx.profile.flags)
    bundle = ctx.state.server.bundle
    if bundle is not None:
        flags = public_flags(ctx.profile, bundle.flags)  # the ledger never holds a secret flag's value
    # Said at once: a bench runs for minutes, and its start is what a user (or a drill) waits to see.
    with waiting_for(ctx.say, f"bench_serving ({preset_name}) on release {release or '(none)'}",
                     bench_limit_s(preset), first_after_s=0.0):
        run = run_bench(ctx.ct, ctx.host, ctx.profile, preset_name, preset, overrides=overrides,
                        release_id=release, flags=flags, nvlink=nvlink, boot=last_boot(ctx),
                        profile_steps=ctx.inputs.profile_steps)
    source: RunSource = "sweep" if overrides else "roll" if "roll" in ctx.options.command else "bench"
    measured = MeasuredRun(run=run, step=ctx.records[-1].name if ctx.records else "", source=source,
                           release=release, preset=preset_name, flags=flags,
                           label=", ".join(f"{k}={v}" for k, v in overrides.items()) if overrides else None,
                           judged_by=gates_from(ctx) if judged else ())
    if run.profile is not None:  # after a roll: did the share the last profiled run's verdict named move?
        run.profile = replace(run.profile, since=share_move(ctx, run, release))
    ctx.state.measured.append(measured)
    return run


def gates_from(ctx: StepContext) -> tuple[str, ...]:
    """The playbook's gate steps from the running step on: those that judge what it measures."""
    from orchestrator.engine.step import REGISTRY

    names = ctx.playbook_steps
    here = ctx.records[-1].name if ctx.records else ""
    after = names[names.index(here):] if here in names else []
    return tuple(n for n in after if (s := REGISTRY.get(n)) is not None and s.gate is not None)


def share_move(ctx: StepContext, run: BenchRun, release: str | None) -> ShareMove | None:
    """The last profiled run's verdict against this run's: the earlier runs are this run's own, newest first (not
    filed yet), then the ledger's. Reading only: the ledger is written by the command after the run."""
    from orchestrator.bench.measured import as_record
    from orchestrator.profile.moved import share_move as moved
    from orchestrator.store.store import ledger

    own = [as_record(ctx.host.name, m) for m in reversed(ctx.state.measured)]
    try:
        earlier = ledger().list_runs(host=ctx.host.name, limit=200)
    except Exception as exc:  # the ledger is a local convenience; never fail a rollout on it
        ctx.say(f"  warning: could not read the local ledger: {exc}")
        earlier = []
    return moved(own + earlier, run.run_id, release, run.diagnosis)


def bench_due(ctx: StepContext) -> str | None:
    """Why this run's throughput check runs; None when it does not: a run that changed nothing on a host whose
    release passed its checks would load a server that serves users (1024 prompts at full concurrency) to learn
    nothing new. It runs after any change, for a release without a verdict, and on request (`--bench`)."""
    if ctx.options.bench:
        return "--bench"
    changed = [r.name for r in ctx.records if r.status == "changed"]
    if changed:
        return f"{changed[0]} changed"
    if ctx.state.server.installed or ctx.state.server.restarted:
        return "the server restarted"
    if ctx.facts.find(CT.current_verdict) is None:
        return "the release has no verdict yet"
    return None


@step("throughput", ct_facts=(CT.current_boot, CT.current_verdict), gate=GateSpec())
def throughput(ctx: StepContext, record: StepRecord) -> None:
    """bench_serving with the profile's preset, GPU telemetry alongside; pass/fail against the minimum. Runs after a
    change, for an unverified release or on request (bench_due)."""
    if ctx.options.dry_run or ctx.options.skip_bench:
        record.status = "skipped"
        record.summary = "dry run" if ctx.options.dry_run else "--skip-bench"
        return
    if bench_due(ctx) is None:
        record.status = "skipped"
        record.summary = "nothing changed and the release passed its checks: no bench (--bench runs it)"
        return
    preset_name = ctx.options.preset or ctx.profile.bench_preset
    repeats = [bench_for_release(ctx, preset_name, ctx.state.server.release, judged=True)
               for _ in range(ctx.profile.gate_repeats)]
    # With repeats the gate judges the median run: one slow run on a busy machine does not revert a release.
    rates = [x.result.output_throughput for x in repeats]
    run = repeats[median_index(rates)]
    ctx.state.bench_run = run
    r = run.result
    record.details.update(run.to_dict())
    if len(repeats) > 1:
        est = estimate(rates)
        record.details["repeats"] = {"output_throughput": est.to_dict(), "runs": [x.run_id for x in repeats],
                                     "gated_run": run.run_id}
        ctx.say(f"  {len(repeats)} runs: {est.text()} tok/s (95 % CI), spread {est.low:.1f}..{est.high:.1f}; "
                f"the gate takes the median run {run.run_id}")
    minimum = ctx.profile.min_output_throughput
    fails = []
    if (r.failed or 0) > 0:
        fails.append(f"{r.failed} of {r.num_prompts} requests failed")
    if minimum is not None and r.output_throughput < minimum:
        fails.append(f"output throughput {r.output_throughput:.1f} tok/s is below the minimum {minimum:.1f}")
    stuck = [link for x in repeats if x.links is not None for link in x.links.failures]
    if stuck:  # a link below its capability under this load throttles every all-reduce of TP8
        seen = {link.gpu: link for link in stuck}
        fails.append("PCIe link below its capability under load: " + "; ".join(
            seen[g].message("bench_serving") for g in sorted(seen)))
    elif run.links is not None:
        record.details["links_summary"] = run.links.summary()
    for d in run.diagnosis[:3]:
        ctx.say(f"  diagnosis: {d.message}")
    power = ""
    if run.telemetry is not None and run.telemetry.mean_power_pct_of_limit is not None:
        power = f", GPUs at {run.telemetry.mean_power_pct_of_limit:.0f} % of power limit"
    record.summary = (f"{preset_name}: {r.output_throughput:.1f} output tok/s, concurrency "
                      f"{(r.concurrency or 0):.0f}, mean TPOT {(r.mean_tpot_ms or 0):.2f} ms{power}")
    if fails:
        fix = "see the diagnosis lines; compare with `deploy history --bench`"
        if stuck:
            fix = (f"a stuck link is hardware, not the flags: drain the host (`deploy router remove "
                   f"{ctx.host.name}` when it serves behind the router), reboot the node to retrain the link, then "
                   "`deploy up` again; if it stays below, reseat the GPU or its riser (docs/hardware.md)")
        raise CheckFailed("throughput check failed: " + "; ".join(fails), fix=fix, host=ctx.host.name,
                          details=run.to_dict())


def measured_server(ctx: StepContext, release: str | None, expect: ExpectedServer) -> ServerProcess:
    """The pid of the server a tune's run is about to measure, once it proved to be `expect`: the expected
    release, the same process as the point's earlier runs, that release's flags. Else HostChanged, before any
    request is sent: a run of another server would be filed under the point's label."""
    from orchestrator.render.service import stored_launch_argv
    from orchestrator.steps.software import installed_schema, server_stack

    proc = ctx.facts.get(CT.server_process) or parse_server_process("")
    if (release == expect.release and expect.restarts is not None and proc.restarts is not None
            and proc.restarts > expect.restarts):
        # systemd restarted it itself (Restart=on-failure): the point's own server died under its load
        crashes = proc.restarts - expect.restarts
        raise CheckFailed(f"sglang died under this point's load and systemd restarted it ({crashes} automatic "
                          "restart(s) since the point's earlier runs)",
                          fix=f"`journalctl -u {PATHS.unit_name}` in CT {ctx.vmid} says why it died",
                          host=ctx.host.name)
    if release != expect.release:
        why = f"the current release is {release}, not {expect.release}"
    elif proc.pid is None:
        why = "no sglang process runs"
    elif not proc.settled or not proc.argv:  # a stop waits for the process: real sglang answers 503 meanwhile
        why = f"sglang (pid {proc.pid}) is stopping or restarting"
    elif expect.pid is not None and proc.pid != expect.pid:
        why = f"sglang runs as pid {proc.pid}, not as pid {expect.pid} that the earlier runs measured (restarted)"
    else:
        _, schema = installed_schema(ctx)
        stored = ctx.facts.get(CT.current_flags)
        diff = argv_difference(proc.argv, stored_launch_argv(ctx.profile, dict(stored.root) if stored else {},
                                                             schema, venv=server_stack(ctx).venv))
        if diff is None:
            return proc
        why = f"sglang (pid {proc.pid}) does not run release {release}'s flags: {diff}"
    raise HostChanged(why, fix="`deploy status` shows what runs now", host=ctx.host.name)


def still_measured(ctx: StepContext, release: str | None) -> None:
    """After a tune's run saw failed requests: the server it measured is still the one (one more round trip).
    A restart by another command is HostChanged and systemd's own restart a crash, not figures of this point."""
    seen = ctx.state.server.measured
    if ctx.inputs.expect is None or seen is None:
        return
    refresh_ct_facts(ctx, CT.server_process)
    measured_server(ctx, release, ExpectedServer(ctx.inputs.expect.release, seen.pid, seen.restarts))


@step("bench", ct_facts=(CT.current_release, CT.health, CT.current_flags, CT.current_meta, CT.sglang_version,
                         CT.server_process, CT.current_boot))
def bench(ctx: StepContext, record: StepRecord) -> None:
    """Run the preset (once, or once per sweep point) against the running server, with telemetry."""
    ensure_facts(ctx)
    release = ctx.facts.get(CT.current_release)
    if ctx.inputs.expect is not None:  # first: another server, healthy or not, is not the one to measure
        ctx.state.server.measured = measured_server(ctx, release, ctx.inputs.expect)
    code = ctx.facts.get(CT.health)
    if code != "200":
        still_measured(ctx, release)  # /health was read after the process: a stop begun in between says so
        raise CheckFailed(f"the server in CT {ctx.vmid} is not healthy (/health "
                          f"{code if code is not None else 'unreachable'})",
                          fix="deploy status / deploy up", host=ctx.host.name)
    preset = ctx.options.preset or ctx.profile.bench_preset
    points = ctx.inputs.bench_points or ({},)
    runs = []
    for overrides in points:
        label = ", ".join(f"{k}={v}" for k, v in overrides.items()) or preset
        ctx.say(f"bench {label} …")
        try:
            run = bench_for_release(ctx, preset, release, overrides)
        except CheckFailed:
            still_measured(ctx, release)  # a restart under the run says so, instead of failing the point
            raise
        if run.failure or (run.result.failed or 0) > 0:
            still_measured(ctx, release)
        ctx.say(f"  {run.result.output_throughput:.1f} output tok/s, concurrency {(run.result.concurrency or 0):.0f}, "
                f"mean TPOT {(run.result.mean_tpot_ms or 0):.2f} ms")
        if run.failure:
            ctx.say(f"  [fail] a failed bench: {run.failure}")
        if run.links is not None and not run.links.ok:
            ctx.say(f"  [fail] {run.links.summary()}")
        runs.append(run)
    ctx.state.bench_runs = runs
    ctx.state.server.release = release
    failed = sum(1 for r in runs if r.failure)
    record.summary = (f"{len(runs)} run(s) of {preset} on release {release}"
                      + (f"; {failed} of them a failed bench (too many failed requests)" if failed else ""))
