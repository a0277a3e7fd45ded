"""The correctness gate's judgement: a candidate's golden answers against the current release's record. Pure.

Why: an NVFP4 GEMM that returns zeros, an FP4 MoE that produces garbage, or a backend that loops on one token
all leave /health at 200, and a short smoke answer often still matches its regex. At temperature 0 a healthy
server answers a fixed prompt with the same tokens; what differs between two healthy releases is the small
nondeterminism of batched kernels, which flips a token only where the top two candidates were nearly tied and
moves logprobs by hundredths. So the gate compares tokens over a prefix (a divergence at a near-tie ends the
comparison without failing), bounds the logprob drift of the agreeing tokens, and runs detectors on the candidate
alone (NaN or missing logprobs, empty output, long repeated-token runs, control characters, one token only) that
need no reference at all.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RECORD_VERSION = 1


@dataclass(frozen=True)
class Thresholds:
    """The profile's `correctness` thresholds (documented in docs/gates.md; defaults tolerate kernel noise)."""

    prefix_tokens: int = 16  # tokens that must agree with the reference, from the first
    tie_margin: float = 0.5  # nats between the reference's top two below which a flipped token is a near-tie
    max_logprob_delta: float = 0.5  # largest |Δ logprob| of one agreeing token
    mean_logprob_delta: float = 0.1  # mean |Δ logprob| over the agreeing tokens of one prompt
    max_repeat_run: int = 8  # the same token this many times in a row (beyond the reference's own longest run)


@dataclass(frozen=True)
class Answer:
    """One golden prompt's answer: token ids, their text, their logprobs and the top logprobs at each position."""

    name: str
    prompt_sha: str  # of the prompt text sent: a record made for another prompt is not comparable
    ids: tuple[int, ...]
    texts: tuple[str, ...]
    logprobs: tuple[float | None, ...]
    top: tuple[tuple[tuple[int, float | None], ...], ...] = ()

    @property
    def text(self) -> str:
        return "".join(self.texts)


@dataclass(frozen=True)
class Record:
    """A release's golden answers (golden.json beside its verdict.json)."""

    release: str | None
    answers: tuple[Answer, ...]

    def get(self, name: str) -> Answer | None:
        return next((a for a in self.answers if a.name == name), None)


@dataclass(frozen=True)
class Finding:
    """One reason the gate failed: the prompt, the token position (None: the whole answer), what was seen."""

    prompt: str
    position: int | None
    kind: str  # diverged, logprob-drift, nan-logprobs, missing-logprobs, empty, repeat-run, control-chars, same-token
    message: str

    def line(self) -> str:
        where = f" at token {self.position}" if self.position is not None else ""
        return f"prompt {self.prompt!r}{where}: {self.message}"


@dataclass(frozen=True)
class PromptResult:
    """What was compared for one prompt: agreeing tokens and the largest logprob drift among them."""

    prompt: str
    compared: bool  # a reference answer for the same prompt text existed
    agreed: int  # tokens equal to the reference's, from the first
    ended: str  # why the comparison ended: "end", "near-tie at N", "prefix", "diverged at N"
    max_delta: float
    mean_delta: float


@dataclass(frozen=True)
class Verdict:
    passed: bool
    findings: tuple[Finding, ...]
    results: tuple[PromptResult, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def reason(self) -> str:
        return "; ".join(f.line() for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed,
                "findings": [{"prompt": f.prompt, "position": f.position, "kind": f.kind, "message": f.message}
                             for f in self.findings],
                "results": [{"prompt": r.prompt, "compared": r.compared, "agreed": r.agreed, "ended": r.ended,
                             "max_logprob_delta": round(r.max_delta, 4), "mean_logprob_delta": round(r.mean_delta, 4)}
                            for r in self.results],
                "notes": list(self.notes)}


def prompt_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------- detectors
def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def longest_run(ids: Sequence[int]) -> tuple[int, int]:
    """(length, start) of the longest run of one repeated token."""
    best, best_at, run, at = 0, 0, 0, 0
    for i, tok in enumerate(ids):
        if i and tok == ids[i - 1]:
            run += 1
        else:
            run, at = 1, i
        if run > best:
            best, best_at = run, at
    return best, best_at


def control_char_at(texts: Sequence[str]) -> tuple[int, str] | None:
    """The first token whose text holds a control character other than tab and newlines."""
    for i, piece in enumerate(texts):
        for ch in piece:
            if ch not in "\n\r\t" and unicodedata.category(ch) in ("Cc", "Cs", "Co"):
                return i, f"U+{ord(ch):04X}"
    return None


def detect(ans: Answer, ref: Answer | None, thr: Thresholds) -> list[Finding]:
    """What is wrong with an answer on its own (the reference only excuses what it shows itself)."""
    found: list[Finding] = []
    if not ans.ids:
        return [Finding(ans.name, None, "empty", "empty output (no tokens)")]
    bad = next((i for i, lp in enumerate(ans.logprobs) if lp is not None and not math.isfinite(lp)), None)
    if bad is not None:
        found.append(Finding(ans.name, bad, "nan-logprobs", f"logprob {ans.logprobs[bad]} (NaN or infinite)"))
    missing = next((i for i in range(len(ans.ids)) if i >= len(ans.logprobs) or ans.logprobs[i] is None), None)
    if missing is not None:
        found.append(Finding(ans.name, missing, "missing-logprobs",
                             "no logprob for the token (a NaN serialised as null, or none returned)"))
    top_bad = next((i for i, row in enumerate(ans.top) if any(not _finite(lp) for _, lp in row)), None)
    if top_bad is not None and bad is None and missing is None:
        found.append(Finding(ans.name, top_bad, "nan-logprobs", "a top logprob is NaN or missing"))
    ref_run = longest_run(ref.ids)[0] if ref is not None else 0
    run, at = longest_run(ans.ids)
    if run >= thr.max_repeat_run and run > ref_run:
        found.append(Finding(ans.name, at, "repeat-run", f"token {ans.ids[at]} ({ans.texts[at]!r}) repeated "
                                                        f"{run} times in a row"))
    if len(ans.ids) > 1 and len(set(ans.ids)) == 1 and not (ref is not None and len(set(ref.ids)) == 1):
        found.append(Finding(ans.name, 0, "same-token", f"every one of the {len(ans.ids)} tokens is token "
                                                        f"{ans.ids[0]} ({ans.texts[0]!r})"))
    ctl = control_char_at(ans.texts)
    if ctl is not None and (ref is None or control_char_at(ref.texts) is None):
        found.append(Finding(ans.name, ctl[0], "control-chars", f"control character {ctl[1]} in the text"))
    return found


# --------------------------------------------------------------------------------------------- comparison
def _margin(ref: Answer, i: int) -> float | None:
    """The reference's top-1 minus top-2 logprob at position i (None: not known)."""
    if i >= len(ref.top) or len(ref.top[i]) < 2:
        return None
    lps = sorted((lp for _, lp in ref.top[i] if lp is not None and math.isfinite(lp)), reverse=True)
    return (lps[0] - lps[1]) if len(lps) >= 2 else None


def _piece(a: Answer, i: int) -> str:
    return f"{a.ids[i]} ({a.texts[i]!r})" if i < len(a.ids) else "the end of the answer"


def compare_one(ans: Answer, ref: Answer, thr: Thresholds) -> tuple[PromptResult, list[Finding]]:
    """Token agreement over the prefix and logprob drift of the agreeing tokens, for one prompt."""
    deltas: list[float] = []
    found: list[Finding] = []
    n = max(len(ans.ids), len(ref.ids))
    agreed, ended = 0, "end"
    for i in range(n):
        same = i < len(ans.ids) and i < len(ref.ids) and ans.ids[i] == ref.ids[i]
        if not same:
            margin = _margin(ref, i)
            if i >= thr.prefix_tokens:
                ended = f"diverged at {i}, past the {thr.prefix_tokens}-token prefix"
            elif margin is not None and margin < thr.tie_margin:
                ended = f"near-tie at {i} (reference top-2 margin {margin:.3f} < {thr.tie_margin})"
            else:
                ended = f"diverged at {i}"
                why = f"reference top-2 margin {margin:.2f} nats" if margin is not None else "no reference margin"
                found.append(Finding(ans.name, i, "diverged",
                                     f"answers diverged: reference {_piece(ref, i)}, candidate {_piece(ans, i)} "
                                     f"({why}; {agreed} tokens agreed before it)"))
            break
        agreed += 1
        a, r = ans.logprobs[i] if i < len(ans.logprobs) else None, ref.logprobs[i] if i < len(ref.logprobs) else None
        if _finite(a) and _finite(r):
            delta = abs(a - r)  # type: ignore[operator]
            deltas.append(delta)
            if delta > thr.max_logprob_delta:
                found.append(Finding(ans.name, i, "logprob-drift",
                                     f"logprob of token {_piece(ans, i)} moved {delta:.3f} "
                                     f"(reference {r:.3f}, candidate {a:.3f}; limit {thr.max_logprob_delta})"))
                ended = f"logprob drift at {i}"
                break
    mean = sum(deltas) / len(deltas) if deltas else 0.0
    if mean > thr.mean_logprob_delta and not any(f.kind == "logprob-drift" for f in found):
        found.append(Finding(ans.name, None, "logprob-drift",
                             f"mean logprob drift {mean:.3f} over {len(deltas)} agreeing tokens "
                             f"(limit {thr.mean_logprob_delta})"))
    result = PromptResult(ans.name, True, agreed, ended, max(deltas, default=0.0), mean)
    return result, found


def judge(candidate: Record, reference: Record | None, thr: Thresholds) -> Verdict:
    """The gate: detectors on every candidate answer, comparison where the reference has the same prompt."""
    findings: list[Finding] = []
    results: list[PromptResult] = []
    notes: list[str] = []
    if reference is None:
        notes.append("no reference record: detectors only; this release's answers become the reference")
    for ans in candidate.answers:
        ref = reference.get(ans.name) if reference is not None else None
        if reference is not None and ref is None:
            notes.append(f"prompt {ans.name!r} is not in the reference record: detectors only")
        if ref is not None and ref.prompt_sha != ans.prompt_sha:
            notes.append(f"prompt {ans.name!r} changed since the reference was recorded: detectors only")
            ref = None
        own = detect(ans, ref, thr)
        if ref is None:
            results.append(PromptResult(ans.name, False, 0, "not compared", 0.0, 0.0))
            findings += own
            continue
        result, found = compare_one(ans, ref, thr)
        results.append(result)
        findings += found + own  # where the answers diverged first: that is what an operator looks at
    return Verdict(not findings, tuple(findings), tuple(results), tuple(notes))


# --------------------------------------------------------------------------------------------- records
def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def parse_answer(data: dict[str, Any]) -> Answer:
    """An answer as the probe prints it and golden.json stores it (a JSON null logprob stays None)."""
    ids = tuple(int(i) for i in data.get("ids") or [])
    texts = tuple(str(t or "") for t in data.get("texts") or [])
    texts = texts + ("",) * (len(ids) - len(texts))
    logprobs = tuple(_num(x) if x != "NaN" else math.nan for x in data.get("logprobs") or [])
    top = tuple(tuple((int(t[0]), _num(t[1]) if t[1] != "NaN" else math.nan) for t in row if len(t) >= 2)
                for row in data.get("top") or [])
    return Answer(str(data.get("name", "")), str(data.get("prompt_sha", "")), ids, texts, logprobs, top)


#: What golden.json holds (record_dict writes it): named in the gate's error when a file is of another shape.
RECORD_SHAPE = ('{"version": 1, "release": ID, "answers": [{"name": STR, "prompt_sha": STR, "ids": [INT, …], '
                '"texts": [STR, …], "logprobs": [NUMBER|null|"NaN", …], "top": [[[INT, NUMBER|null|"NaN"], …], …]}, '
                '…]} with at least one answer')


def _logprob_ok(x: Any) -> bool:
    return x is None or x == "NaN" or _num(x) is not None


def _answer_problem(a: Any) -> str:
    if not isinstance(a, dict):
        return f"is a JSON {type(a).__name__}, not an object"
    if not isinstance(a.get("name"), str) or not a["name"] or not isinstance(a.get("prompt_sha"), str):
        return "has no name or prompt_sha"
    ids = a.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return "has no ids list of token ids"
    if not isinstance(a.get("texts", []), list) or not all(t is None or isinstance(t, str) for t in a.get("texts", [])):
        return "has texts that are not a list of strings"
    lps = a.get("logprobs")
    if not isinstance(lps, list) or not all(_logprob_ok(x) for x in lps):
        return "has no logprobs list of numbers"
    top = a.get("top", [])
    if not isinstance(top, list) or not all(isinstance(row, list) and all(
            isinstance(t, list) and len(t) >= 2 and isinstance(t[0], int) and not isinstance(t[0], bool)
            and _logprob_ok(t[1]) for t in row) for row in top):
        return "has a top that is not a list of [token id, logprob] lists"
    return ""


def record_problem(data: Any) -> str:
    """Why golden.json's content is not a record this version reads ("" when it is): a reference of another shape
    must fail the gate, never compare nothing and pass."""
    if not isinstance(data, dict):
        return f"it is a JSON {type(data).__name__}, not an object"
    if data.get("version") != RECORD_VERSION:
        return f"its version is {data.get('version')!r}, not {RECORD_VERSION}"
    answers = data.get("answers")
    if not isinstance(answers, list):
        return "its answers are not a list"
    if not answers:
        return "it holds no answers"
    for i, a in enumerate(answers):
        problem = _answer_problem(a)
        if problem:
            return f"answer {i + 1} {problem}"
    return ""


def parse_record(data: Any, release: str | None = None) -> Record | None:
    """golden.json's content (None when it is not a record this version reads: record_problem says why)."""
    if record_problem(data):
        return None
    return Record(str(data.get("release") or release or ""), tuple(parse_answer(a) for a in data["answers"]))


def _lp(x: float | None) -> float | str | None:
    return "NaN" if x is not None and not math.isfinite(x) else x


def record_dict(record: Record) -> dict[str, Any]:
    """golden.json: strict JSON (a NaN is written "NaN", never as a bare NaN token)."""
    return {"version": RECORD_VERSION, "release": record.release, "answers": [
        {"name": a.name, "prompt_sha": a.prompt_sha, "text": a.text, "ids": list(a.ids), "texts": list(a.texts),
         "logprobs": [_lp(x) for x in a.logprobs], "top": [[[t, _lp(lp)] for t, lp in row] for row in a.top]}
        for a in record.answers]}
