"""server_unit (unchanged vs changed unit), health's journal reading, and a roll's install/rollback decisions."""

from __future__ import annotations

import base64
import json
import re
import shlex

import pytest

from orchestrator.engine.state import Candidate
from orchestrator.errors import CheckFailed, ConfigError, RemoteError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.stacks.stack import StackRecord
from orchestrator.steps.checks import raise_if_fatal_logged
from orchestrator.steps.release import bundle_for, desired_flags

CURRENT = "20261130T020000-abababab"
PREVIOUS = "20261129T020000-cdcdcdcd"
HEALTHY = "code=200\nActiveState=active\nSubState=running\nNRestarts=0\n--journal--\n"


def unit_facts(run, *, same: bool, active: str = "active", enabled: str = "enabled") -> dict[str, str]:
    bundle = bundle_for(run.ctx, desired_flags(run.ctx))
    unit, env = bundle.file("sglang.service"), bundle.file("sglang.env")
    unit_sha = unit.sha256 if same else "0" * 64
    return {"unit_sha": f"{unit_sha} /etc/systemd/system/sglang.service\n{env.sha256} /etc/sglang/sglang.env\n",
            "active": f"{active}\n", "enabled": f"{enabled}\n", "current_release": f"releases/{CURRENT}\n",
            "releases": f"{PREVIOUS}\n{CURRENT}\n"}


def test_unchanged_unit_on_an_active_server_restarts_nothing(make_run) -> None:
    run = make_run({}, {})
    run = make_run({}, unit_facts(run, same=True))
    rec = run.step("server_unit")
    assert rec.status == "ok" and rec.summary.startswith("unit unchanged")
    assert run.node.calls == []
    assert run.ctx.state.server.release == CURRENT and not run.ctx.state.server.restarted


def test_changed_unit_is_validated_installed_as_a_release_and_restarted(make_run) -> None:
    run = make_run({}, {})
    run = make_run({}, unit_facts(run, same=False))
    run.node.answer("DEPLOY_PROBE_EOF", json.dumps({"ok": True, "version": "0.5.12.post1"}))
    run.node.answer("systemctl restart sglang", "JOURNAL_CURSOR=s=4a;i=2a;b=77\n")
    rec = run.step("server_unit")
    assert rec.status == "changed" and "restart sglang" in rec.changes[0]
    probe, install = run.node.commands("script")
    assert probe.startswith("pct exec 120 -- /root/ml-env/bin/python - ")  # the container's own sglang parser
    assert install.startswith("pct exec 120 -- bash -s <<'DEPLOY_CT_EOF'\n")
    assert "systemctl restart sglang" in install and "mv -T /var/lib/deploy/current.deploy-tmp" in install
    # The cursor is taken before the restart, and the unit is enabled so the container's boot starts it.
    assert install.index("--show-cursor") < install.index("systemctl enable --quiet sglang") < install.index(
        "systemctl restart sglang")
    server = run.ctx.state.server
    assert server.restarted and server.journal_cursor == "s=4a;i=2a;b=77" and server.release != CURRENT
    assert server.bundle is not None and "--tensor-parallel-size 8" in server.bundle.file("sglang.service").content


def test_unchanged_active_but_disabled_unit_is_enabled_without_a_restart(make_run) -> None:
    run = make_run({}, {})
    run = make_run({}, unit_facts(run, same=True, enabled="disabled"))
    run.node.answer("systemctl enable", "enabled\n")
    rec = run.step("server_unit")
    assert rec.status == "changed" and rec.changes == ["enable sglang.service so the container starts it at boot"]
    [enable] = run.node.commands("run")
    assert enable == "pct exec 120 -- bash -c 'systemctl enable --quiet sglang && systemctl is-enabled sglang'"
    assert not run.ctx.state.server.restarted


def test_plan_says_it_would_enable_a_disabled_unit(make_run) -> None:
    run = make_run({}, {}, dry_run=True)
    run = make_run({}, unit_facts(run, same=True, enabled="disabled"), dry_run=True)
    rec = run.step("server_unit")
    assert rec.status == "would-change" and "enable sglang.service" in rec.summary
    assert run.node.calls == []


def test_health_reads_the_journal_after_the_cursor_taken_at_start_and_moves_it_on(make_run) -> None:
    run = make_run({}, {"health": "000", "active": "activating\n"})
    run.ctx.state.server.restarted = True
    run.ctx.state.server.journal_cursor = "s=1;i=c0"
    run.ctx.step_options["timeout_s"] = 30
    # The first probe (after the start cursor) sees loading lines and the next cursor; the second one, only
    # asked for what follows that cursor, sees the server up.
    run.node.answer("i=c0", HEALTHY.replace("code=200", "code=000")
                    + "Load weight begin\n-- cursor: s=1;i=c1\n")
    run.node.answer("i=c1", HEALTHY + "Uvicorn running on http://127.0.0.1:8000\n"
                    + "-- cursor: s=1;i=c2\n")
    rec = run.step("health")
    assert rec.status == "ok" and rec.summary.startswith("healthy after")
    first, second = (shlex.split(c) for c in run.node.commands("run"))
    assert first[:6] == ["pct", "exec", "120", "--", "bash", "-c"]
    assert "journalctl -u sglang --no-pager -q -o cat --show-cursor --after-cursor='s=1;i=c0'" in first[6]
    assert "--after-cursor='s=1;i=c1'" in second[6] and "tail -n" not in first[6] + second[6]  # no line count
    assert rec.details["journal_tail"] == ["Load weight begin", "Uvicorn running on http://127.0.0.1:8000"]


def test_health_without_a_cursor_reads_only_since_the_units_start(make_run) -> None:
    """systemd started sglang (container boot): nothing before its main process's start is read."""
    run = make_run({}, {"health": "000", "active": "activating\n"})
    run.node.answer("journalctl", HEALTHY + "-- cursor: s=1;i=9\n")
    assert run.step("health").status == "ok"
    [probe] = run.node.commands("run")
    assert "systemctl show -p ExecMainStartTimestamp --value sglang" in probe
    assert "--since=" in probe and "--after-cursor" not in probe


def test_raise_if_fatal_logged_reads_from_the_start_cursor(make_run) -> None:
    run = make_run({}, {})
    run.ctx.state.server.journal_cursor = "s=9;i=5"
    run.node.answer("journalctl", "RuntimeError: Unsupported architecture sm_120\n-- cursor: s=9;i=6\n")
    with pytest.raises(CheckFailed) as err:
        raise_if_fatal_logged(run.ctx)
    assert "Unsupported architecture" in err.value.what
    [read] = run.node.commands("run")
    assert "--after-cursor='s=9;i=5'" in shlex.split(read)[6]


def test_health_stops_at_once_on_a_fatal_journal_line(make_run) -> None:
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.node.answer("journalctl", "code=000\nActiveState=active\nSubState=running\nNRestarts=0\n--journal--\n"
                                  "RuntimeError: Unsupported architecture sm_120\n")
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert "Unsupported architecture" in err.value.what
    assert len(probes(run)) == 1  # no waiting out the timeout


STARTING = HEALTHY.replace("code=200", "code=000")
CAPTURE_BEGIN = "[2026-11-30 03:15:55 TP0] Capture cuda graph begin. This can take up to several minutes.\n"


def test_a_server_seen_dead_before_journald_stored_its_last_line_is_named_by_that_line(make_run) -> None:
    """systemd reported the exit before journald had stored the NaN line: one more read quotes it."""
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.ctx.state.server.journal_cursor = "s=1;i=d0"
    run.node.answer("i=d0", "code=000\nActiveState=activating\nSubState=auto-restart\nNRestarts=0\n--journal--\n"
                            "-- cursor: s=1;i=d1\n")
    run.node.answer("i=d1", "code=000\nActiveState=activating\nSubState=auto-restart\nNRestarts=0\n--journal--\n"
                            "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n")
    run.node.answer("NVRM: Xid", "")  # the host's kernel log, read once after a failed wait: no Xid
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert "probability tensor contains" in err.value.what and "exited" not in err.value.what


def test_health_names_an_oom_after_capture_began_in_an_earlier_probe_cuda_graph_oom(make_run) -> None:
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.ctx.state.server.journal_cursor = "s=1;i=c0"
    run.ctx.step_options["timeout_s"] = 30
    run.node.answer("i=c0", STARTING + CAPTURE_BEGIN + "-- cursor: s=1;i=c1\n")
    run.node.answer("i=c1", STARTING + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB.\n")
    run.node.answer("NVRM: Xid", "")  # the host's kernel log, read once after a failed wait: no Xid
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert err.value.details["code"] == "cuda-graph-oom" and "--cuda-graph-max-bs" in (err.value.fix or "")


def test_health_wait_that_runs_out_while_capturing_says_capture_stuck(make_run) -> None:
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.ctx.step_options["timeout_s"] = 0.01
    run.node.answer("journalctl", STARTING + CAPTURE_BEGIN)
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert err.value.what.startswith("CUDA-graph capture never ended within")
    assert "Capture cuda graph begin" in err.value.what and err.value.details["code"] == "capture-stuck"


def test_health_wait_that_runs_out_after_capture_ended_is_a_plain_timeout(make_run) -> None:
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.ctx.step_options["timeout_s"] = 0.01
    run.node.answer("journalctl", STARTING + CAPTURE_BEGIN
                    + "[2026-11-30 03:19:23 TP0] Capture cuda graph end. Time elapsed: 208.48 s.\n")
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert err.value.what.startswith("sglang did not turn healthy within") and "code" not in err.value.details


def test_health_capture_bound_ends_the_wait_before_the_start_timeout(make_run) -> None:
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.ctx.step_options.update(timeout_s=60, capture_timeout_s=0.001)
    run.node.answer("journalctl", STARTING + CAPTURE_BEGIN)
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert err.value.details["code"] == "capture-stuck"
    assert len(probes(run)) == 2  # the probe that saw capture begin, and the one past the bound


def test_a_failed_health_wait_reads_the_hosts_kernel_log_once_for_xids(make_run) -> None:
    run = make_run({}, {"health": "000"})
    run.ctx.state.server.restarted = True
    run.node.answer("journalctl", STARTING + "[2026-11-30 03:20:00 TP3] RuntimeError: CUDA error: an illegal memory "
                                             "access was encountered\n")
    run.node.answer("journalctl -k", "2026-11-30T03:19:58+0000 pve kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has "
                                     "fallen off the bus\n")
    with pytest.raises(CheckFailed) as err:
        run.step("health")
    assert err.value.details["code"] == "illegal-memory-access"
    assert "Xid 79 on GPU 0000:44:00" in err.value.what and len(err.value.details["host_xids"]) == 1
    [read] = [c for c in run.node.commands("run") if "journalctl -k" in c]
    assert not read.startswith("pct exec") and "--since=-" in read  # on the host, not in the container


def probes(run) -> list[str]:
    return [c for c in run.node.commands("run") if c.startswith("pct exec")]


def test_healthy_server_not_restarted_by_this_run_is_not_probed(make_run) -> None:
    run = make_run({}, {"health": "200"})
    rec = run.step("health")
    assert rec.status == "ok" and run.node.calls == []


def releases_accepted(node) -> None:
    """The container's answers to release scripts: a recorded verdict prints nothing; installing a release or
    making one current prints the unit's journal cursor."""
    node.answer("verdict.json", "")
    node.answer("JOURNAL_CURSOR=", "JOURNAL_CURSOR=s=1;i=7\n")


def candidate(run) -> Candidate:
    schema = FlagSchema.load("0.5.12.post1")
    base = canonicalize(run.ctx.profile.flags, schema)
    new = canonicalize({**run.ctx.profile.flags, "max-running-requests": 1024}, schema)
    return Candidate(previous=CURRENT, base_flags=base, new_flags=new,
                     flag_diff=[("max-running-requests", 2048, 1024)], baseline=None)


def installed_candidate(make_run) -> tuple:  # type: ignore[no-untyped-def]
    """A roll's run that has just installed its candidate (CURRENT stays the previous release): (run, record)."""
    run = make_run({}, {"releases": f"{PREVIOUS}\n{CURRENT}\n", "current_release": f"releases/{CURRENT}\n"},
                   skip_bench=True)
    run.ctx.state.candidate = candidate(run)
    releases_accepted(run.node)
    return run, run.step("install_release")


def test_roll_installs_the_candidate_and_a_later_failure_rolls_back_to_the_previous_release(make_run) -> None:
    run, rec = installed_candidate(make_run)
    assert rec.status == "changed" and run.ctx.on_failure is not None
    [install] = run.node.commands("script")
    rid = run.ctx.state.server.release
    assert rid is not None and rid != CURRENT
    # The unit the release carries has the rolled flag: --set … → Candidate.new_flags → bundle → unit file.
    written = re.search(rf"base64 -d > /var/lib/deploy/releases/{rid}.partial/sglang.service <<'DEPLOY_B64_EOF'\n"
                        r"(.*?)\nDEPLOY_B64_EOF", install, re.DOTALL)
    assert written and "--max-running-requests 1024" in base64.b64decode(written.group(1)).decode()
    assert "systemctl restart sglang" in install

    # Health fails later: the runner calls the registered undo with the error.
    run.node.answer("journalctl", HEALTHY)
    # The rollback reports only what it reads back: the current release and /health, together.
    run.node.answer("readlink /var/lib/deploy/current", f"releases/{CURRENT}\n200\n")
    err = CheckFailed("sglang did not turn healthy", details={"journal": ["boom"]})
    run.ctx.on_failure(err, rec)
    verdict, activate = run.node.commands("script")[1:3]
    assert f"/var/lib/deploy/releases/{rid}/verdict.json" in verdict
    assert f"ln -sfn releases/{CURRENT} /var/lib/deploy/current.deploy-tmp" in activate
    assert "systemctl restart sglang" in activate
    assert f"rolled back to {CURRENT}" in err.what and err.details["candidate"] == rid
    assert f"current release read back: {CURRENT}, /health 200" in err.what


def test_gate_without_a_bench_keeps_the_candidate_and_disarms_the_rollback(make_run) -> None:
    run = make_run({}, {})
    run.ctx.state.candidate = candidate(run)
    run.ctx.state.server.release = "20261130T030000-efefefef"
    run.ctx.on_failure = lambda err, rec: None
    releases_accepted(run.node)
    rec = run.step("gate")
    assert rec.summary.endswith("kept (no bench)") and run.ctx.on_failure is None
    [verdict] = run.node.commands("script")
    assert "/var/lib/deploy/releases/20261130T030000-efefefef/verdict.json" in verdict


def test_status_of_a_stopped_container_says_so_instead_of_release_none(make_run) -> None:
    run = make_run({"ct_status": "status: stopped\n", "gpu_power": "0, 85.1, 600.0, 0\n1, 84.9, 600.0, 0\n"}, None)
    rec = run.step("status")
    info = run.ctx.state.status
    assert info is not None and info.container == "stopped" and not info.container_running
    assert rec.summary == "CT 120 is stopped; GPUs 170 W of 1200 W"
    assert info.release is None and info.to_dict()["container"] == "stopped"


def test_status_of_a_running_container_reads_the_release(make_run) -> None:
    run = make_run({"ct_status": "status: running\n", "gpu_power": ""},
                   {"current_release": f"releases/{CURRENT}\n", "active": "active\n", "health": "200",
                    "current_verdict": '{"verdict": "kept"}', "current_meta": '{"source": "up"}'})
    rec = run.step("status")
    assert rec.summary.startswith(f"release {CURRENT} (kept), sglang active, /health 200")


def test_status_reads_the_containers_address_in_the_same_round_trip(make_run) -> None:
    """A DHCP address is known only inside the container: read by the facts batch, typed in the status."""
    run = make_run({"ct_status": "status: running\n", "gpu_power": ""},
                   {"current_release": f"releases/{CURRENT}\n", "active": "active\n", "health": "200",
                    "ct_address": "2: eth0    inet 10.163.90.17/22 brd 10.163.91.255 scope global dynamic eth0\n"})
    run.step("status")
    info = run.ctx.state.status
    assert info is not None and info.address == "10.163.90.17" and info.to_dict()["address"] == "10.163.90.17"


def test_a_verdict_that_cannot_be_written_fails_the_gate_instead_of_reporting_kept(make_run) -> None:
    """Issue 21 §2: with a full disk the verdict write fails; the roll must fail, not say `kept` with no verdict."""
    run, rec = installed_candidate(make_run)
    rid = run.ctx.state.server.release
    run.node.answer("verdict.json", rc=1, stderr="base64: write error: No space left on device")
    with pytest.raises(RemoteError) as failed:
        run.step("gate")
    assert f"recording the verdict (kept) of release {rid}" in failed.value.what
    assert "No space left on device" in failed.value.what and "df -h" in failed.value.fix
    # The runner then undoes the roll: the evidence cannot be written either, the rollback still happens.
    assert run.ctx.on_failure is not None
    run.node.answer("journalctl", HEALTHY)
    run.node.answer("readlink /var/lib/deploy/current", f"releases/{CURRENT}\n200\n")
    run.ctx.on_failure(failed.value, rec)
    assert any(f"ln -sfn releases/{CURRENT} /var/lib/deploy/current.deploy-tmp" in c
               for c in run.node.commands("script"))
    assert f"rolled back to {CURRENT}" in failed.value.what
    assert "recording the verdict (rolled-back)" in failed.value.what


# ------------------------------------------------------------------------------------ stacks (issue 35)
NEW_STACK = StackRecord("50c1fa50a5bb", "/opt/deploy/stacks/50c1fa50a5bb", "0.5.12.post1", "sglang==0.5.12.post1",
                        False, "2026-12-03T00:00:00+00:00", "0.5.12.post1")


def verified_legacy_release(run) -> dict[str, object]:
    """The facts of a verified `up` release of an earlier deploy (no stack in its meta: the profile's venv)."""
    return {**unit_facts(run, same=True), "current_meta": json.dumps({"id": CURRENT, "source": "up"}),
            "current_verdict": json.dumps({"verdict": "kept"})}


def test_a_stack_change_is_validated_by_the_new_venv_and_armed_to_roll_back(make_run) -> None:
    run = make_run({}, {})
    run = make_run({}, verified_legacy_release(run))
    run.ctx.state.stack = NEW_STACK
    run.node.answer("DEPLOY_PROBE_EOF", json.dumps({"ok": True, "version": "0.5.12.post1"}))
    run.node.answer("systemctl restart sglang", "JOURNAL_CURSOR=s=4a;i=2a;b=77\n")
    rec = run.step("server_unit")
    assert rec.status == "changed" and rec.details["rollback_armed"] == CURRENT
    probe, install = run.node.commands("script")
    assert probe.startswith(f"pct exec 120 -- {NEW_STACK.venv}/bin/python - ")  # the new stack's own parser
    assert f"ExecStart={NEW_STACK.venv}/bin/python -m sglang.launch_server" in (
        run.ctx.state.server.bundle.file("sglang.service").content)
    meta = json.loads(base64.b64decode(re.search(r"/meta\.json <<'DEPLOY_B64_EOF'\n(\S+)\n", install)[1]))
    assert meta["stack"] == NEW_STACK.to_meta()
    assert run.ctx.on_failure is not None  # a failing health/smoke/gate puts CURRENT back, on its own venv


def test_a_flag_change_on_the_same_stack_is_not_armed(make_run) -> None:
    run = make_run({}, {})
    facts = verified_legacy_release(run)
    run = make_run({}, {**facts, "unit_sha": "0" * 64 + " /etc/systemd/system/sglang.service\n"})
    run.node.answer("DEPLOY_PROBE_EOF", json.dumps({"ok": True, "version": "0.5.12.post1"}))
    run.node.answer("systemctl restart sglang", "JOURNAL_CURSOR=s=4a;i=2a;b=77\n")
    rec = run.step("server_unit")
    assert rec.status == "changed" and "rollback_armed" not in rec.details and run.ctx.on_failure is None


def test_a_rollback_to_a_release_whose_stack_was_pruned_is_refused_before_any_change(make_run) -> None:
    run = make_run({}, {"current_release": f"releases/{CURRENT}\n", "releases": f"{PREVIOUS}\n{CURRENT}\n",
                        "current_meta": json.dumps({"id": CURRENT, "previous": PREVIOUS}), "stacks": ""})
    run.node.answer(f"{PREVIOUS}/meta.json", json.dumps({"id": PREVIOUS, "stack": NEW_STACK.to_meta()}))
    with pytest.raises(ConfigError) as err:
        run.step("rollback_release")
    assert err.value.exit_code == 2
    assert err.value.what == (f"release {PREVIOUS} runs on stack {NEW_STACK.sha} (sglang==0.5.12.post1), which was "
                              "pruned; nothing was changed")
    assert "keep_stacks" in (err.value.fix or "")
    assert run.node.commands("script") == []  # nothing activated
