"""The router migration's pure parts (router/staging.py) and the decision an interrupted one leads to (resume in
router/migrate.py), without a container: the remote phases run end to end in tests/e2e/test_fleet_router_migrate.py."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.inventory.models import RouterSpec
from orchestrator.router.facts import RouterFacts
from orchestrator.router.migrate import Migration, old_metrics_port, resume
from orchestrator.router.release import release_of
from orchestrator.router.render import router_schema
from orchestrator.router.staging import (
    STAGING_LAUNCHER_PATH,
    STAGING_UNIT_PATH,
    MigrationState,
    redirect_script,
    render_staging,
    staging_metrics_port,
    staging_port,
    stop_redirecting_script,
)


def test_the_redirect_takes_syn_only_through_a_set_in_both_chains() -> None:
    script = redirect_script(30000, 30010)
    rule = "tcp dport @ports tcp flags & (syn | ack) == syn redirect to :30010"
    assert f"type nat hook prerouting priority -100; {rule};" in script
    assert f"type nat hook output priority -100; ip daddr 127.0.0.1 {rule};" in script
    assert "elements = { 30000 }" in script and "apt-get install -y -q nftables" in script
    assert "nft delete element ip deploy_mig ports '{ 30000 }'" in stop_redirecting_script(30000)


def test_the_staging_router_has_its_own_unit_launcher_ports_and_no_key_in_argv() -> None:
    spec = RouterSpec(runs_on="gpu-1", package="smg", flags={"prometheus-port": 29100})
    bundle = render_staging(spec, router_schema(release_of(spec)), ["http://10.0.0.2:8000"], "sk-secret-1")
    assert (staging_port(spec), staging_metrics_port(spec)) == (30010, 29110)
    assert bundle.unit.remote_path == STAGING_UNIT_PATH and bundle.launcher.remote_path == STAGING_LAUNCHER_PATH
    assert "--port 30010" in bundle.unit.content and "--prometheus-port 29110" in bundle.unit.content
    assert STAGING_LAUNCHER_PATH in bundle.unit.content and "from smg.launch_router" in bundle.launcher.content
    assert "sk-secret-1" not in bundle.unit.content and "sk-secret-1" not in " ".join(bundle.argv)


def test_state_and_old_metrics_port_parse() -> None:
    state = MigrationState.parse("module=sglang_router\nstaging=active\nstaging_unit=yes\nredirect=yes\n"
                                 "redirecting=yes\n")
    assert state.leftover and state.text() == ("staging unit sglang-router-staging (active) and nft table ip "
                                               "deploy_mig")
    finishing = MigrationState.parse("module=smg\nstaging=active\nstaging_unit=yes\nredirect=yes\n"
                                     "staging_draining=yes\n")
    assert finishing.staging_draining and not finishing.redirecting and not finishing.router_draining
    assert finishing.text() == ("staging unit sglang-router-staging (active, draining) and nft table ip deploy_mig "
                                "(no longer redirecting)")
    assert not MigrationState.parse("module=smg\nstaging=\n").leftover
    assert old_metrics_port("ExecStart=/opt/x/bin/python l.py --port 30000 --prometheus-port 29005") == 29005
    assert old_metrics_port("ExecStart=/opt/x/bin/python l.py --port 30000") == 29000


class Recorder(Migration):
    """A Migration whose remote steps are recorded, not run."""

    def __init__(self) -> None:
        super().__init__(ct=None, base_url="http://10.0.0.5:30000", staging_port=30010,  # type: ignore[arg-type]
                         staging_metrics_port=29010, old_metrics_port=29000, api_key=None, urls=[], python="py",
                         gate=lambda _u: {}, say=lambda _m: None)
        self.done: list[str] = []

    def _run(self, script: str, what: str, *, timeout: int = 120) -> None:
        self.done.append(what)

    def final_gate(self) -> None:
        self.done.append("final gate")

    def switch(self, final: Any, *, old_running: bool) -> None:
        self.done.append(f"switch old_running={old_running}")

    def finish(self, phase: str = "finish") -> None:
        self.done.append(f"finish {phase}")


@pytest.mark.parametrize(("state", "active", "want", "steps"), [
    # 0.3.2 still serves: undo (the redirect goes, the staging smg drains), then a new migration may start
    (MigrationState("sglang_router", "active", True, True), "active", "undone", ["finish undo"]),
    # 0.3.2 was stopped, the staging smg serves through the redirect: complete
    (MigrationState("sglang_router", "active", True, True), "inactive", "completed",
     ["switch old_running=False", "finish finish"]),
    # a redirect to a dead staging port is deleted first, whatever follows
    (MigrationState("sglang_router", "failed", True, True), "active", "undone",
     ["nftables redirect removal", "finish undo"]),
    # killed in the finish: smg serves the public port, the staging smg drains (is-active says active): the
    # serving smg is gated, never stopped, and the finish completes (issue 50, 3)
    (MigrationState("smg", "active", True, True, staging_draining=True), "active", "finished",
     ["final gate", "finish finish"]),
    (MigrationState("smg", "active", True, True, redirecting=False), "active", "finished",
     ["final gate", "finish finish"]),
    # killed after the switch started smg, before its gate, or a handover before its switch: the same (the redirect
    # still serves new connections; the usual converge follows and hands over to a changed unit)
    (MigrationState("smg", "active", True, True, redirecting=True), "active", "finished",
     ["final gate", "finish finish"]),
    # a handover killed while the old smg drained after the switch's SIGTERM: waited for, then the final unit
    (MigrationState("smg", "active", True, True, redirecting=True, router_draining=True), "active",
     "completed", ["switch old_running=True", "finish finish"]),
    # killed while 0.3.2 drained after the switch's SIGTERM: its drain is waited for (no second SIGTERM), not
    # undone (the undo would send new connections to a router that no longer accepts them)
    (MigrationState("sglang_router", "active", True, True, redirecting=True, router_draining=True), "active",
     "completed", ["switch old_running=True", "finish finish"]),
])
def test_resume_undoes_while_0_3_2_serves_and_completes_once_it_stopped(state: MigrationState, active: str,
                                                                         want: str, steps: list[str]) -> None:
    m = Recorder()
    facts = RouterFacts(probe="", file_sha={}, active=active)
    assert resume(m, state, facts, final=None) == want  # type: ignore[arg-type]
    assert m.done == steps


def test_a_graceful_stop_marks_the_unit_draining_and_never_terms_a_marked_one_again() -> None:
    from orchestrator.router.staging import drain_mark, graceful_stop_script

    script = graceful_stop_script("sglang-router-staging", 30010, 120)
    mark = drain_mark("sglang-router-staging")
    assert f"if [ ! -e {mark} ]; then" in script and "systemctl kill -s TERM sglang-router-staging; fi" in script
    assert script.index("date +%s >") < script.index("systemctl kill") and f"rm -f {mark}" in script


def test_the_scripts_key_value_lines_are_read_stripped_and_other_lines_ignored() -> None:
    from orchestrator.router.staging import key_values

    out = "active\nconnections= 5\nwaited=3\nnft: warning\nmodule=sglang_router=x\n"
    assert key_values(out) == {"connections": "5", "waited": "3", "module": "sglang_router=x"}


def test_the_finish_names_a_staging_smg_that_was_not_running_and_never_says_none_requests() -> None:
    """Issue 50 (LOW): an undo whose staging smg was not running printed "the staging smg finished its None
    request(s) in flight" (its metrics did not answer). It says what it found instead."""
    from orchestrator.router.migrate import GracefulStop

    said: list[str] = []

    class Finish(Migration):
        def __init__(self, was_active: bool) -> None:
            super().__init__(ct=None, base_url="http://10.0.0.5:30000", staging_port=30010,  # type: ignore[arg-type]
                             staging_metrics_port=29010, old_metrics_port=29000, api_key=None, urls=[], python="py",
                             gate=lambda _u: {}, say=said.append)
            self.was_active = was_active

        def _run(self, script: str, what: str, *, timeout: int = 120) -> None:
            return None

        def in_flight(self, metrics_port: int, *, name: str = "") -> int | None:
            return None

        def graceful_stop(self, unit: str, port: int) -> GracefulStop:
            return GracefulStop(connections=-1, waited_s=0.0, was_active=self.was_active)

    Finish(False).finish("undo")
    Finish(True).finish()
    assert not any("None" in s for s in said), said
    assert "redirect removed; the staging smg was not running, removed" in said[1]
    assert "its metrics did not answer, so their number is not known" in said[3]
