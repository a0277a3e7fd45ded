"""`deploy bench --profile N`: the shell that runs the profiler probe beside bench_serving, and what came back
(pure: strings in, typed values out; bench/run.py runs it in the bench's own round trip).

The probe (probe.py) starts DELAY_S after the bench, asks sglang for N decode steps on every rank (a bench that
ends sooner: /stop_profile, and the steps recorded), and prints the trimmed traces as one JSON document, read back
here into a breakdown and a verdict. The verdict goes into the run's diagnosis (code `profile-<verdict>`), so
--json, the ledger and `history --bench` carry it without a new column; the power findings of the same run are
its evidence.
"""

from __future__ import annotations

import base64
import binascii
import json
import shlex
from dataclasses import dataclass

from orchestrator.profile.breakdown import Breakdown, breakdown
from orchestrator.profile.kernels import CLASS_ORDER
from orchestrator.profile.moved import ShareMove
from orchestrator.profile.trace import TraceError, parse_trace
from orchestrator.profile.verdict import Verdict, judge
from orchestrator.resources import module_source
from orchestrator.verdicts.power import Diagnosis

#: Seconds after the bench starts before the profiler does: the first requests have reached the server by then
#: (sglang's profile_by_stage starts recording at the next decode step).
DELAY_S = 0.5
#: After the bench ended, how long the probe still waits for the trace files (sglang writes them at its next step).
GRACE_S = 15.0
#: The decode steps a profiled window may ask for (each rank's trace grows with them).
MAX_STEPS = 64


@dataclass(frozen=True)
class ProfileOutcome:
    """What the profiled window gave: a breakdown and its verdict, or why there is none."""

    breakdown: Breakdown | None
    verdict: Verdict | None
    problem: str = ""
    #: After a roll: the share the previous profiled run's verdict predicted a lever for, then and now (moved.py).
    since: ShareMove | None = None

    def payload(self) -> dict[str, object]:
        return {"breakdown": self.breakdown.payload() if self.breakdown else None,
                "verdict": self.verdict.model_dump(mode="json") if self.verdict else None,
                "problem": self.problem or None, "since": self.since.to_dict() if self.since else None}

    def diagnosis(self) -> Diagnosis:
        """The verdict as one more diagnosis line of the run (what the ledger stores)."""
        if self.verdict is None or self.breakdown is None:
            return Diagnosis(code="profile-failed", severity="warn",
                             message=f"no step-time breakdown: {self.problem}", figures={})
        b, v = self.breakdown, self.verdict
        figures: dict[str, float | int | str | None] = {f"{c.value}_share": round(b.mean_share(c), 4)
                                                         for c in CLASS_ORDER}
        figures.update(ranks=len(b.ranks), steps=min(r.steps for r in b.ranks),
                       mean_step_us=round(max(r.mean_step_us for r in b.ranks), 1), slow_rank=v.slow_rank)
        return Diagnosis(code=f"profile-{v.code}", severity="info" if v.code == "host-bound" else "warn",
                         message=f"{v.message} — next: {v.next_action}", figures=figures)


def probe_command(python: str, url: str, out_dir: str, steps: int, prefix: str, ranks: int, done_file: str,
                  wait_s: float) -> str:
    """The probe's command line (its source as `-c`: no file to push; it holds no secret)."""
    return shlex.join([python, "-c", module_source("orchestrator.profile.probe"), url, out_dir, str(steps),
                       f"{DELAY_S:g}", prefix, str(ranks), f"{wait_s:g}", done_file, f"{GRACE_S:g}"])


def with_profile(bench: str, probe: str, probe_out: str, done_file: str) -> str:
    """bench_serving with the probe in the background; the bench's exit status is kept, the probe is waited for."""
    q = shlex.quote
    return (f"rm -f {q(done_file)}; {probe} > {q(probe_out)} 2>/dev/null &\n{bench}\nBENCH_RC=$?\n"
            f": > {q(done_file)}; wait; ( exit $BENCH_RC )")


def read_outcome(section: str, power: list[Diagnosis]) -> ProfileOutcome:
    """The probe's JSON document → the breakdown and verdict (power findings as evidence), or the problem."""
    try:
        doc = json.loads(section.strip().splitlines()[-1]) if section.strip() else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return ProfileOutcome(None, None, "the profiler probe printed nothing readable")
    try:
        traces = [parse_trace(base64.b64decode(f["gz_b64"]), str(f["name"])) for f in doc.get("files") or []]
        if not traces:
            return ProfileOutcome(None, None, str(doc.get("message") or "no trace came back"))
        b = breakdown(traces)
    except (TraceError, KeyError, TypeError, binascii.Error) as exc:
        return ProfileOutcome(None, None, f"the traces could not be read: {exc}")
    problem = "" if doc.get("ok") else str(doc.get("message") or "")
    return ProfileOutcome(b, judge(b, power), problem)
