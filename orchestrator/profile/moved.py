"""After a roll, did the predicted share move? (pure: ledger records and the new verdict in, a typed answer out)

A profiled bench's verdict names a lever, and each lever acts on one share of the step: collective-bound (and
rank-imbalanced, whose cost shows as the other ranks waiting in the collective) on the collective share,
host-bound on GPU idle, moe-/attention-/gemm-/other-bound on that class. The ledger keeps each profiled run's
shares in its `profile-<verdict>` diagnosis figures (capture.py), so the next profiled bench on another release
(a roll came between) compares the same share before and after: it moved when it fell by MOVED_POINTS or more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.ledger.sqlite import RunRecord
from orchestrator.profile.kernels import KernelClass
from orchestrator.verdicts.power import Diagnosis

#: A share that fell by at least this much (of the step, 0.05 = 5 points) moved; less is noise between windows.
MOVED_POINTS = 0.05

#: The share each verdict's lever acts on.
LEVER_SHARE: dict[str, KernelClass] = {
    "collective-bound": KernelClass.collective, "rank-imbalanced": KernelClass.collective,
    "host-bound": KernelClass.idle, "moe-bound": KernelClass.moe, "attention-bound": KernelClass.attention,
    "gemm-bound": KernelClass.dense_gemm, "other-bound": KernelClass.other,
}
_NAMES = {KernelClass.collective: "collective", KernelClass.moe: "MoE", KernelClass.attention: "attention",
          KernelClass.dense_gemm: "dense GEMM", KernelClass.other: "other", KernelClass.idle: "GPU idle"}


@dataclass(frozen=True)
class ShareMove:
    """The predicted share of an earlier profiled run against this run's, across a roll."""

    since_run: str
    since_release: str | None
    release: str | None
    predicted_by: str  # the earlier verdict, whose lever was expected to move the share
    share: str  # the kernel class
    before: float
    after: float
    moved: bool

    def line(self) -> str:
        name = _NAMES[KernelClass(self.share)]
        outcome = ("the predicted lever moved it" if self.moved else
                   "it rose: the change did not help it" if self.after > self.before + MOVED_POINTS else
                   "the predicted lever did not move it")
        return (f"{name} share {100 * self.before:.0f} % → {100 * self.after:.0f} %: {outcome} (run {self.since_run}"
                f" on release {self.since_release or '-'} said {self.predicted_by}; now release {self.release or '-'})")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.line()}


def _profile_verdict(diagnosis: Sequence[Diagnosis]) -> Diagnosis | None:
    return next((d for d in diagnosis if d.code.startswith("profile-")
                 and d.code.removeprefix("profile-") in LEVER_SHARE), None)


def share_move(earlier: Sequence[RunRecord], run_id: str, release: str | None,
               diagnosis: Sequence[Diagnosis]) -> ShareMove | None:
    """This run's predicted share against the newest earlier profiled run of the host (`earlier`: newest first);
    None when this run has no verdict, no earlier run has one, or that run ran on this same release (no roll)."""
    now = _profile_verdict(diagnosis)
    if now is None:
        return None
    last = next((r for r in earlier if r.id != run_id and _profile_verdict(r.diagnosis) is not None), None)
    if last is None or last.release_id == release:
        return None
    then = _profile_verdict(last.diagnosis)
    assert then is not None
    cls = LEVER_SHARE[then.code.removeprefix("profile-")]
    before, after = then.figures.get(f"{cls.value}_share"), now.figures.get(f"{cls.value}_share")
    if not isinstance(before, int | float) or not isinstance(after, int | float):
        return None
    return ShareMove(since_run=last.id, since_release=last.release_id, release=release,
                     predicted_by=then.code.removeprefix("profile-"), share=cls.value, before=float(before),
                     after=float(after), moved=after <= before - MOVED_POINTS)
