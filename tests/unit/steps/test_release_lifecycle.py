"""Release lifecycle decisions in-process: the header names the release id (without entering any hash), every
install is a new release, an interrupted `up` is abandoned by the next, and pruning keeps the last good state."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path

from orchestrator.ledger.sqlite import new_run_id
from orchestrator.releases.store import activate_script
from orchestrator.render.files import body_sha256
from orchestrator.steps.release import baseline_bench, bundle_for, desired_flags, usable_baseline
from tests.unit.steps.test_server_steps import CURRENT, PREVIOUS, candidate, releases_accepted, unit_facts


def written(script: str, rid: str, name: str) -> str:
    m = re.search(rf"base64 -d > /var/lib/deploy/releases/{rid}.partial/{name} <<'DEPLOY_B64_EOF'\n(.*?)\n"
                  r"DEPLOY_B64_EOF", script, re.DOTALL)
    assert m, f"{name} of {rid} is not written"
    return base64.b64decode(m.group(1)).decode()


def test_the_unit_header_names_the_release_but_no_hash_depends_on_it(make_run) -> None:
    run = make_run({}, {"releases": f"{PREVIOUS}\n{CURRENT}\n", "current_release": f"releases/{CURRENT}\n"},
                   skip_bench=True)
    cand = candidate(run)
    run.ctx.state.candidate = cand
    releases_accepted(run.node)
    run.step("install_release")
    rid = run.ctx.state.server.release
    assert rid is not None
    unit = written(run.node.commands("script")[0], rid, "sglang.service")
    assert f"# deploy: release {rid} body-sha256 " in unit
    unreleased = bundle_for(run.ctx, cand.new_flags)
    assert "# deploy: release unreleased" in unreleased.file("sglang.service").content
    # Same body hash as the unnamed render: the restart decision and the id's hash part ignore the id.
    assert body_sha256(unit) == unreleased.file("sglang.service").sha256
    assert rid.endswith(unreleased.sha256[:8])
    meta = json.loads(written(run.node.commands("script")[0], rid, "meta.json"))
    assert meta["id"] == rid


def test_an_identical_candidate_still_gets_a_new_release(make_run) -> None:
    """Content seen before (an earlier, failed attempt with the same flags) is installed as a new release."""
    run = make_run({}, {})
    cand = candidate(run)
    earlier = f"20261130T010000-{bundle_for(run.ctx, cand.new_flags).sha256[:8]}"
    run = make_run({}, {"releases": f"{PREVIOUS}\n{earlier}\n{CURRENT}\n", "current_release": f"releases/{CURRENT}\n"},
                   skip_bench=True)
    run.ctx.state.candidate = candidate(run)
    releases_accepted(run.node)
    run.step("install_release")
    rid = run.ctx.state.server.release
    assert rid not in (earlier, CURRENT, PREVIOUS)
    assert f"/var/lib/deploy/releases/{earlier}/verdict.json" not in run.node.commands("script")[0]


def test_next_up_abandons_an_interrupted_ups_release_without_restarting(make_run) -> None:
    run = make_run({}, {})
    facts = {**unit_facts(run, same=True), "current_meta": json.dumps({"id": CURRENT, "source": "up",
                                                                       "previous": PREVIOUS})}
    run = make_run({}, facts)  # no current_verdict: the up that installed CURRENT never finished its checks
    releases_accepted(run.node)
    rec = run.step("server_unit")
    assert rec.status == "changed"
    assert any(f"release {CURRENT} marked abandoned" in c for c in rec.changes)
    verdict, install = run.node.commands("script")
    assert f"/var/lib/deploy/releases/{CURRENT}/verdict.json" in verdict
    body = re.search(r"<<'DEPLOY_B64_EOF'\n(.*?)\nDEPLOY_B64_EOF", verdict, re.DOTALL)
    assert body and json.loads(base64.b64decode(body.group(1)))["verdict"] == "abandoned"
    # Its files are installed again as a new release; same files, so no restart.
    server = run.ctx.state.server
    assert server.installed and server.release not in (CURRENT, None) and not server.restarted
    assert "systemctl start sglang" in install and "systemctl restart" not in install

    # release_verdict then verifies the new release (the abandoned one keeps its verdict).
    run.step("release_verdict")
    last = run.node.commands("script")[-1]
    assert f"/var/lib/deploy/releases/{server.release}/verdict.json" in last


def test_a_verified_up_release_is_left_alone(make_run) -> None:
    run = make_run({}, {})
    facts = {**unit_facts(run, same=True), "current_meta": json.dumps({"id": CURRENT, "source": "up"}),
             "current_verdict": json.dumps({"verdict": "kept"})}
    run = make_run({}, facts)
    rec = run.step("server_unit")
    assert rec.status == "ok" and run.node.calls == []
    assert desired_flags(run.ctx) is not None


def test_stopped_server_with_the_right_files_starts_the_current_release_again(make_run) -> None:
    run = make_run({}, {})
    facts = {**unit_facts(run, same=True, active="failed"),
             "current_meta": json.dumps({"id": CURRENT, "source": "up"}),
             "current_verdict": json.dumps({"verdict": "kept"})}
    run = make_run({}, facts)
    releases_accepted(run.node)
    rec = run.step("server_unit")
    assert rec.status == "changed"
    [start] = run.node.commands("script")
    assert f"ln -sfn releases/{CURRENT} " in start and "systemctl start sglang" in start
    assert ".partial" not in start  # no new release for a mere start
    assert run.ctx.state.server.release == CURRENT and not run.ctx.state.server.installed


def prune_in(root: Path, release_id: str, keep: int = 10) -> list[str]:
    """Run the activation script's prune (with its PREV line) by bash on a scratch releases dir under `root`."""
    script = activate_script(release_id, restart=True, keep=keep)
    prev = next(line for line in script.splitlines() if line.startswith("PREV="))
    prune = script[script.index("cd /var/lib/deploy/releases"):]
    text = "\n".join(["set -e", prev, prune]).replace("/var/lib/deploy", str(root))
    subprocess.run(["bash", "-c", text], check=True)
    return sorted(p.name for p in (root / "releases").iterdir())


def make_releases(root: Path, verdicts: dict[str, str | None], current: str) -> None:
    for rid, verdict in verdicts.items():
        (root / "releases" / rid).mkdir(parents=True)
        if verdict:
            (root / "releases" / rid / "verdict.json").write_text(json.dumps({"verdict": verdict}, sort_keys=True))
    (root / "current").symlink_to(f"releases/{current}")


IDS = [f"20261130T{h:02d}0000-abababab" for h in range(16)]


def test_pruning_keeps_the_current_and_the_newest_verified_release(tmp_path: Path) -> None:
    """Rolled back to the oldest release after many failed rolls: it and the newest verified one stay."""
    make_releases(tmp_path, {IDS[0]: "kept", IDS[1]: "kept", **{rid: "rolled-back" for rid in IDS[2:]}}, IDS[15])
    (tmp_path / "releases" / "20261130T000000-abababab.partial").mkdir()  # not a release: never touched
    left = prune_in(tmp_path, IDS[0])  # the rollback makes IDS[0] current
    assert left == sorted([IDS[0], IDS[1], *IDS[6:], "20261130T000000-abababab.partial"])


def test_pruning_during_a_roll_keeps_the_release_it_replaces(tmp_path: Path) -> None:
    """A candidate is activated while an old, verified-but-not-newest release is current: that is the way back."""
    make_releases(tmp_path, {IDS[0]: "kept", IDS[1]: "kept", **{rid: "rolled-back" for rid in IDS[2:15]},
                             IDS[15]: None}, IDS[0])
    left = prune_in(tmp_path, IDS[15])  # the candidate; IDS[0] was current, IDS[1] is the newest verified
    assert left == sorted([IDS[0], IDS[1], *IDS[6:]])


def test_a_partial_bench_file_is_never_a_baseline(make_run) -> None:
    good = json.dumps({"completed": 10, "output_throughput": 100.0, "duration": 1.0, "total_output_tokens": 100})
    partial = json.dumps({"completed": 3, "output_throughput": 999.0, "duration": 1.0, "total_output_tokens": 30})
    run = make_run({}, {"current_bench": f"bench-e2e--r-1.jsonl\t{good}\nbench-e2e--r-2.jsonl.partial\t{partial}\n"})
    found = baseline_bench(run.ctx, "e2e")
    assert found is not None and found[0].output_throughput == 100.0 and found[1] == "r-1"


def _bench_line(run_id: str, tput: float) -> str:
    record = json.dumps({"completed": 10, "output_throughput": tput, "duration": 1.0, "total_output_tokens": 100})
    return f"bench-e2e--{run_id}.jsonl\t{record}\n"


def test_the_gate_baseline_carries_its_age_preset_and_release(make_run) -> None:
    """Issue 25 item 2: a verdict names the run it compared with, and how old it was."""
    young = new_run_id(datetime.now() - timedelta(minutes=5))
    run = make_run({}, {"current_bench": _bench_line(young, 120.0)})
    result, evidence, missing = usable_baseline(run.ctx, "e2e", "R1")
    assert result is not None and result.output_throughput == 120.0 and missing == ""
    assert evidence is not None and (evidence.run_id, evidence.release, evidence.preset) == (young, "R1", "e2e")
    assert evidence.age_s is not None and 290 < evidence.age_s < 400
    assert evidence.describe().startswith(f"run {young} of release R1, preset e2e, 5 min old")


def test_a_baseline_older_than_the_profile_allows_is_measured_again(make_run) -> None:
    old = new_run_id(datetime.now() - timedelta(hours=30))
    run = make_run({}, {"current_bench": _bench_line(old, 120.0)})
    result, evidence, missing = usable_baseline(run.ctx, "e2e", "R1")
    assert result is None and evidence is None
    assert missing == f"the newest, {old}, is 30.0 h old (baseline_max_age_h 24)"
    run.ctx.profile = run.ctx.profile.model_copy(update={"baseline_max_age_h": 48})
    assert usable_baseline(run.ctx, "e2e", "R1")[0] is not None
    assert usable_baseline(run.ctx, "other", "R1")[2] == "no plain run of preset other on R1"


def test_a_plan_says_it_would_reinstall_a_never_verified_up_release_and_changes_nothing(make_run) -> None:
    run = make_run({}, {})
    facts = {**unit_facts(run, same=True), "current_meta": json.dumps({"id": CURRENT, "source": "up"})}
    run = make_run({}, facts, dry_run=True)
    rec = run.step("server_unit")
    assert rec.status == "would-change" and f"{CURRENT} was never verified" in rec.changes[0]
    assert run.node.calls == []


def test_activation_stages_every_file_before_it_replaces_any() -> None:
    """Issue 21 §7 (MED): a failure while writing (a full /etc/sglang) must leave every installed file as it was."""
    script = activate_script(CURRENT, restart=True, keep=10, fresh=True)
    lines = script.splitlines()
    writes = [i for i, ln in enumerate(lines) if "install -m" in ln or "ln -sfn" in ln]
    swaps = [i for i, ln in enumerate(lines) if re.search(r"\bmv -[fT] ", ln)]
    assert writes and swaps and max(writes) < min(swaps), script
    # Until the swap, a failure removes the staged files and the never-current release directory.
    trap = next(ln for ln in lines if ln.startswith("trap "))
    assert "/etc/systemd/system/sglang.service.deploy-tmp" in trap
    assert f"rm -rf /var/lib/deploy/releases/{CURRENT}" in trap
    assert "rm -rf" not in next(ln for ln in activate_script(CURRENT, restart=True, keep=10).splitlines()
                                if ln.startswith("trap "))  # a rollback's release is never removed
