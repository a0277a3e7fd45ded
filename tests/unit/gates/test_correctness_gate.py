"""The correctness gate's judgement (orchestrator.gates.correctness): comparison and each detector, pure."""

from __future__ import annotations

import math

import pytest

from orchestrator.gates.correctness import (
    Answer,
    Record,
    Thresholds,
    judge,
    longest_run,
    parse_record,
    prompt_sha,
    record_dict,
)
from orchestrator.inventory.models import CorrectnessGate, GoldenPrompt

THR = Thresholds()


def answer(ids: list[int], lps: list[float | None] | None = None, *, name: str = "p", texts: list[str] | None = None,
           margin: float = 2.0, sha: str = "s") -> Answer:
    lps = lps if lps is not None else [-0.1] * len(ids)
    top = tuple(((i, lp), (i + 1, (lp or 0.0) - margin)) for i, lp in zip(ids, lps, strict=True))
    return Answer(name, sha, tuple(ids), tuple(texts or [f" w{i}" for i in ids]), tuple(lps), top)


def rec(*answers: Answer) -> Record:
    return Record("r1", answers)


REF = answer(list(range(100, 132)))


def test_identical_answers_pass_and_report_full_agreement() -> None:
    v = judge(rec(REF), rec(REF), THR)
    assert v.passed and v.results[0].agreed == 32 and v.results[0].ended == "end"


def test_divergence_inside_the_prefix_fails_naming_prompt_and_position() -> None:
    ids = list(REF.ids)
    ids[5] = 999
    v = judge(rec(answer(ids)), rec(REF), THR)
    assert not v.passed
    f = v.findings[0]
    assert (f.prompt, f.position, f.kind) == ("p", 5, "diverged")
    assert "prompt 'p' at token 5: answers diverged: reference 105" in v.reason()


def test_divergence_at_a_near_tie_ends_the_comparison_without_failing() -> None:
    ref = answer(list(REF.ids), margin=0.05)  # top-2 nearly tied everywhere: batched kernels may flip it
    ids = list(REF.ids)
    ids[3] = 999
    v = judge(rec(answer(ids)), rec(ref), THR)
    assert v.passed and v.results[0].ended.startswith("near-tie at 3")


def test_divergence_past_the_prefix_passes() -> None:
    ids = list(REF.ids)
    ids[20] = 999
    v = judge(rec(answer(ids)), rec(REF), Thresholds(prefix_tokens=16))
    assert v.passed and v.results[0].agreed == 20


def test_shorter_answer_inside_the_prefix_is_a_divergence_at_its_end() -> None:
    v = judge(rec(answer(list(REF.ids[:4]))), rec(REF), THR)
    assert not v.passed and v.findings[0].position == 4 and "the end of the answer" in v.findings[0].message


def test_small_logprob_drift_passes_and_large_fails() -> None:
    small = answer(list(REF.ids), [-0.1 + 0.03 * (-1) ** i for i in range(32)])
    assert judge(rec(small), rec(REF), THR).passed
    big = answer(list(REF.ids), [-0.1] * 10 + [-1.2] + [-0.1] * 21)
    v = judge(rec(big), rec(REF), THR)
    assert not v.passed and (v.findings[0].kind, v.findings[0].position) == ("logprob-drift", 10)


def test_mean_logprob_drift_fails_even_below_the_per_token_limit() -> None:
    v = judge(rec(answer(list(REF.ids), [-0.4] * 32)), rec(REF), THR)
    assert not v.passed and v.findings[0].kind == "logprob-drift" and v.findings[0].position is None


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_logprob_detected(bad: float) -> None:
    lps: list[float | None] = [-0.1] * 32
    lps[7] = bad
    v = judge(rec(answer(list(REF.ids), lps)), rec(REF), THR)
    assert [(f.kind, f.position) for f in v.findings] == [("nan-logprobs", 7)]


def test_missing_logprob_detected_without_a_reference() -> None:
    lps: list[float | None] = [-0.1] * 32
    lps[2] = None
    v = judge(rec(answer(list(REF.ids), lps)), None, THR)
    assert [(f.kind, f.position) for f in v.findings] == [("missing-logprobs", 2)]
    assert "detectors only" in v.notes[0]


def test_empty_output_detected() -> None:
    v = judge(rec(answer([])), None, THR)
    assert v.findings[0].kind == "empty" and "empty output" in v.reason()


def test_repeated_token_run_detected_unless_the_reference_has_it_too() -> None:
    looped = answer([1, 2, 3] + [4] * 10)
    v = judge(rec(looped), None, THR)
    assert [(f.kind, f.position) for f in v.findings] == [("repeat-run", 3)]
    assert judge(rec(looped), rec(looped), THR).passed  # the verified release answered the same
    assert longest_run([1, 1, 2, 2, 2]) == (3, 2)


def test_all_same_token_detected() -> None:
    v = judge(rec(answer([7, 7, 7])), None, THR)  # below the repeat-run length: the same-token detector
    assert [f.kind for f in v.findings] == ["same-token"]


def test_control_characters_detected_but_not_newlines_or_tabs() -> None:
    assert judge(rec(answer([1, 2], texts=["a\n", "\tb"])), None, THR).passed
    v = judge(rec(answer([1, 2, 3], texts=["a", "b\x07", "c"])), None, THR)
    assert [(f.kind, f.position) for f in v.findings] == [("control-chars", 1)]
    assert "U+0007" in v.reason()


def test_garbage_names_the_divergence_first() -> None:
    garbage = answer([99, 98, 97], texts=["\x01", "x", "y"], lps=[-11.0, -11.2, -11.1])
    v = judge(rec(garbage), rec(REF), THR)
    assert [f.kind for f in v.findings] == ["diverged", "control-chars"]
    assert v.findings[0].position == 0


def test_changed_prompt_text_is_not_compared() -> None:
    v = judge(rec(answer([5, 6], sha="new")), rec(REF), THR)
    assert v.passed and "changed since the reference" in v.notes[0] and not v.results[0].compared


def test_record_round_trip_keeps_nan_as_strict_json() -> None:
    a = answer([1, 2], [-0.5, math.nan])
    data = record_dict(rec(a))
    assert data["answers"][0]["logprobs"] == [-0.5, "NaN"]
    back = parse_record(data)
    assert back is not None and back.answers[0].ids == (1, 2) and math.isnan(back.answers[0].logprobs[1] or 0.0)
    assert parse_record({"version": 99, "answers": []}) is None and parse_record("x") is None


def test_profile_defaults_ship_a_long_context_prompt_and_refuse_duplicate_names() -> None:
    gate = CorrectnessGate()
    assert len(gate.prompts) >= 3
    assert max(len(p.full_text.split()) for p in gate.prompts) > 8000
    assert prompt_sha("x") == prompt_sha("x") != prompt_sha("y")
    with pytest.raises(ValueError, match="unique"):
        CorrectnessGate(prompts=[GoldenPrompt(name="a", text="x"), GoldenPrompt(name="a", text="y")])
