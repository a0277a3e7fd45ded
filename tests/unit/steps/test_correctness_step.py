"""Steps correctness (roll, up of a new release) and correctness_check (deploy check), in-process: the probe's JSON
line in, the decision out. The probe itself and the stand-in server run for real in tests/sim/software."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.errors import CheckFailed

KEPT = {"verdict": "kept"}


def answer(name: str, ids: list[int], sha: str = "s") -> dict[str, Any]:
    return {"name": name, "prompt_sha": sha, "ids": ids, "texts": [f" w{i}" for i in ids],
            "logprobs": [-0.1] * len(ids), "top": [[[i, -0.1], [i + 1, -3.0]] for i in ids]}


def probe_line(answers: list[dict[str, Any]], reference: list[dict[str, Any]] | None,
               verdict: dict[str, Any] | None = KEPT) -> str:
    ref = {"version": 1, "release": "R0", "answers": reference} if reference is not None else None
    return json.dumps({"answers": answers, "error": "", "seconds": 0.4, "reference": ref,
                       "reference_verdict": verdict, "recorded": "/var/lib/deploy/releases/R1/golden.json"})


GOOD = [answer("arithmetic", list(range(10, 30))), answer("long-context", list(range(50, 70)))]


def up_run(make_run: Any, stdout: str) -> Any:
    run = make_run({}, {})
    server = run.ctx.state.server
    server.release, server.installed, server.restarted, server.previous = "R1", True, True, "R0"
    run.node.answer("DEPLOY_GOLDEN_EOF", stdout + "\n")
    return run


def test_up_of_a_new_release_compares_with_the_previous_release_and_records(make_run: Any) -> None:
    run = up_run(make_run, probe_line(GOOD, GOOD))
    rec = run.step("correctness")
    assert rec.summary.startswith("2 golden prompts ok (2 compared with R0")
    sent = run.node.commands()[-1]
    assert "/var/lib/deploy/releases/R1/golden.json" in sent and "/var/lib/deploy/releases/R0" in sent


def test_a_divergence_fails_naming_correctness_prompt_and_position(make_run: Any) -> None:
    bad = [answer("arithmetic", [10, 11, 999, *range(13, 30)]), GOOD[1]]
    run = up_run(make_run, probe_line(bad, GOOD))
    with pytest.raises(CheckFailed) as err:
        run.step("correctness")
    assert err.value.what.startswith("correctness gate: prompt 'arithmetic' at token 2: answers diverged")
    assert "[reference: release R0]" in err.value.what and "roll back" in err.value.fix


def test_a_reference_without_a_kept_verdict_is_not_used(make_run: Any) -> None:
    other = [answer("arithmetic", list(range(80, 100))), GOOD[1]]  # would diverge at token 0
    run = up_run(make_run, probe_line(other, GOOD, verdict={"verdict": "rolled-back"}))
    rec = run.step("correctness")
    assert "detectors only" in rec.summary
    assert rec.details["correctness"]["notes"] == ["release R0 is not verified (rolled-back): detectors only"]


def test_an_unchanged_server_is_not_rechecked_by_up(make_run: Any) -> None:
    run = make_run({}, {})
    run.ctx.state.server.release = "R1"
    rec = run.step("correctness")
    assert "unchanged" in rec.summary and run.node.calls == []


def test_check_compares_the_current_release_with_its_own_record_and_writes_nothing(make_run: Any) -> None:
    run = make_run({}, {"current_release": "/var/lib/deploy/releases/20261201T180649-48fab87b\n"})
    run.node.answer("DEPLOY_GOLDEN_EOF", probe_line(GOOD, GOOD) + "\n")
    rec = run.step("correctness_check")
    assert rec.summary.startswith("2 golden prompts ok (2 compared with 20261201T180649-48fab87b")
    assert '"record_path": ""' in run.node.commands()[-1]


def test_a_probe_error_is_a_failed_check(make_run: Any) -> None:
    run = up_run(make_run, json.dumps({"answers": [], "error": "URLError: timed out"}))
    with pytest.raises(CheckFailed, match="golden prompts could not be run on release R1: URLError"):
        run.step("correctness")


@pytest.mark.parametrize(("reference", "problem"), [
    ([], "it is a JSON list, not an object"),
    ({"version": 1, "answers": {"arithmetic": GOOD[0]}}, "its answers are not a list"),
    ({"version": 2, "answers": GOOD}, "its version is 2, not 1"),
    ({"version": 1, "answers": []}, "it holds no answers"),
    ({"version": 1, "answers": [GOOD[0], "arithmetic"]}, "answer 2 is a JSON str, not an object"),
    ({"version": 1, "answers": [{**GOOD[0], "ids": ["x"]}]}, "answer 1 has no ids list of token ids"),
    ({"version": 1, "answers": [{"ids": [1], "logprobs": [-0.1]}]}, "answer 1 has no name or prompt_sha"),
], ids=["list", "answers-dict", "version", "empty", "answer-str", "bad-ids", "no-name"])
def test_a_reference_record_of_the_wrong_shape_fails_the_gate_naming_the_file(make_run: Any, reference: Any,
                                                                               problem: str) -> None:
    """Issue 38 LOW: such a golden.json compared nothing and passed ("detectors only")."""
    line = json.loads(probe_line(GOOD, GOOD))
    run = up_run(make_run, json.dumps({**line, "reference": reference}))
    with pytest.raises(CheckFailed) as err:
        run.step("correctness")
    path = "/var/lib/deploy/releases/R0/golden.json"
    assert err.value.what == (f"correctness gate: the reference record {path} of release R0 is not a golden "
                              f"record: {problem}")
    assert '{"version": 1, "release": ID, "answers": [' in err.value.fix and f"mv {path} {path}.bad" in err.value.fix


def test_a_reference_file_that_is_not_json_fails_the_gate_and_a_missing_one_is_detectors_only(make_run: Any
                                                                                              ) -> None:
    line = {**json.loads(probe_line(GOOD, None)), "reference_problem": "it is not JSON (Expecting value: …)"}
    run = up_run(make_run, json.dumps(line))
    with pytest.raises(CheckFailed) as err:
        run.step("correctness")
    assert err.value.what.endswith("is not a golden record: it is not JSON (Expecting value: …)")
    rec = up_run(make_run, probe_line(GOOD, None)).step("correctness")  # a release made before the gate
    assert "detectors only" in rec.summary


def test_a_prompt_missing_from_the_reference_is_said(make_run: Any) -> None:
    run = up_run(make_run, probe_line(GOOD, GOOD[:1]))
    rec = run.step("correctness")
    assert "prompt 'long-context' is not in the reference record: detectors only" in \
        rec.details["correctness"]["notes"]
