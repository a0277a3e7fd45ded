"""What the breakdown says limits decode, and what to do next (pure).

Rules, in order (docs/bench-diagnosis.md, "From the kernels"):

| verdict          | when                                                                                   |
|------------------|----------------------------------------------------------------------------------------|
| rank-imbalanced  | 2+ ranks and one rank's own work (GPU time not idle, not collective) exceeds the       |
|                  | fastest rank's by more than IMBALANCE_RATIO: the others wait for it inside the        |
|                  | collective, so their collective share is a symptom, not the cause                     |
| collective-bound | the ranks' mean collective share >= COLLECTIVE_SHARE (and >= the idle share)          |
| host-bound       | the mean idle share >= IDLE_SHARE: the GPU waits for the host between kernels         |
| moe-bound        | otherwise, MoE kernels are the largest class                                           |
| attention-bound  | otherwise, attention kernels are the largest class                                     |
| gemm-bound       | otherwise, dense GEMMs are the largest class                                           |
| other-bound      | otherwise (norms, copies, sampling are the largest class)                              |

The power reading (verdicts/power.py) is evidence beside the verdict, never the verdict: "low power with high SM
utilisation" reads as "MoE kernels not saturating" in power.py, but a spinning all-reduce shows the same watts; with
a collective share above COLLECTIVE_SHARE the verdict is never moe-bound, and the power line says so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.profile.breakdown import Breakdown
from orchestrator.profile.kernels import KernelClass
from orchestrator.verdicts.power import Diagnosis

COLLECTIVE_SHARE = 0.40
IDLE_SHARE = 0.40
IMBALANCE_RATIO = 0.20

VerdictCode = Literal["rank-imbalanced", "collective-bound", "host-bound", "moe-bound", "attention-bound",
                      "gemm-bound", "other-bound"]

#: Each verdict's next action: concrete flags and commands of this tool and sglang 0.5.12.post1.
NEXT_ACTION: dict[str, str] = {
    "rank-imbalanced": (
        "find why rank {rank} is slower: `deploy doctor` (Xid, PCIe link width/speed, clocks, temperature of that "
        "GPU), `deploy verify-p2p` for its pairs; the other ranks' collective time is them waiting for it"),
    "collective-bound": (
        "the all-reduce dominates: check peer-to-peer (`deploy verify-p2p`); on a PCIe host compare the custom "
        "all-reduce against NCCL (`deploy roll --set disable-custom-all-reduce=true`, then `deploy bench`), and "
        "NCCL's own choice (NCCL_P2P_LEVEL, NCCL_ALGO, NCCL_PROTO=LL for decode-size messages); a smaller TP "
        "group with more replicas moves fewer bytes per token"),
    "host-bound": (
        "the GPU waits for the host between steps: let each scheduling round run more decode steps "
        "(`deploy roll --set num-continuous-decode-steps=4`), keep CUDA graphs and the overlap scheduler on (no "
        "--disable-cuda-graph / --disable-overlap-schedule), raise --cuda-graph-max-bs to the batch the bench "
        "reaches, and offer more concurrency (a larger batch per step)"),
    "moe-bound": (
        "the MoE kernels dominate: try another --moe-runner-backend (triton, flashinfer_cutlass, "
        "flashinfer_trtllm, cutlass) through `deploy tune`, and give triton a tuned config for this GPU and "
        "shape (the 'Using default MoE kernel config' warning at start means none was found); FlashInfer's "
        "autotune must run at start for the flashinfer backends (docs/stacks.md)"),
    "attention-bound": (
        "attention dominates: try another --attention-backend (fa3, flashinfer, triton) through `deploy tune`; "
        "long contexts cost here, so check the bench's input lengths match production"),
    "gemm-bound": (
        "dense GEMMs dominate: the model's linear layers are the work; a quantised checkpoint (FP8/FP4) or a "
        "larger batch per step (concurrency, --max-running-requests) is the lever"),
    "other-bound": (
        "no GEMM, attention or collective dominates: read the top kernels below (norms, copies, sampling); "
        "a fused path (torch compile, --enable-torch-compile) may remove them"),
}


class Verdict(BaseModel):
    """The verdict, its numbers, its next action and the power evidence beside it."""

    model_config = ConfigDict(frozen=True)
    code: VerdictCode
    message: str
    next_action: str
    shares: dict[str, float]
    slow_rank: int | None = None
    evidence: list[str] = []


def judge(b: Breakdown, power: list[Diagnosis] | None = None) -> Verdict:
    """The verdict for one profiled window (every rank's breakdown), with the power findings as evidence."""
    shares = {c.value: round(b.mean_share(c), 4) for c in KernelClass}
    code, message, slow = _decide(b)
    action = NEXT_ACTION[code].format(rank=slow)
    return Verdict(code=code, message=message, next_action=action, shares=shares, slow_rank=slow,
                   evidence=_power_evidence(code, b, power or []))


def _decide(b: Breakdown) -> tuple[VerdictCode, str, int | None]:
    pct = lambda x: f"{100 * x:.0f} %"  # noqa: E731
    step = f"{b.stage.lower()} step"
    if len(b.ranks) >= 2:
        work = sorted(b.ranks, key=lambda r: r.busy_us / max(r.steps, 1))
        fast, slow = work[0], work[-1]
        fast_us, slow_us = fast.busy_us / max(fast.steps, 1), slow.busy_us / max(slow.steps, 1)
        if fast_us > 0 and slow_us > (1 + IMBALANCE_RATIO) * fast_us:
            return ("rank-imbalanced",
                    f"rank {slow.rank} works {slow_us:.0f} µs per step against {fast_us:.0f} µs on rank "
                    f"{fast.rank} (+{pct(slow_us / fast_us - 1)}); the faster ranks wait in the collective "
                    f"({pct(fast.share(KernelClass.collective))} of rank {fast.rank}'s step)", slow.rank)
    coll, idle = b.mean_share(KernelClass.collective), b.mean_share(KernelClass.idle)
    if coll >= COLLECTIVE_SHARE and coll >= idle:
        return ("collective-bound", f"collectives take {pct(coll)} of each {step} (all-reduce between the "
                                    f"{len(b.ranks)} ranks)", None)
    if idle >= IDLE_SHARE:
        return ("host-bound", f"the GPU is idle {pct(idle)} of each {step}: it waits for the host "
                              "(scheduling, launches, sampling)", None)
    compute = {KernelClass.moe: "moe-bound", KernelClass.attention: "attention-bound",
               KernelClass.dense_gemm: "gemm-bound", KernelClass.other: "other-bound"}
    top = max(compute, key=b.mean_share)
    code: VerdictCode = compute[top]  # type: ignore[assignment]
    return (code, f"{top.value.replace('_', ' ')} kernels take the largest share of each {step} "
                  f"({pct(b.mean_share(top))}; collectives {pct(coll)}, idle {pct(idle)})", None)


def _power_evidence(code: VerdictCode, b: Breakdown, power: list[Diagnosis]) -> list[str]:
    out: list[str] = []
    for d in power:
        if d.code == "kernels-not-saturating":
            if code == "moe-bound":
                out.append(f"power agrees: {d.message}")
            else:
                out.append(f"power read alone said kernels are not saturating ({d.figures.get('power_pct_of_limit')}"
                           f" % of the limit at {d.figures.get('mean_sm_util_pct')} % SM); the kernels say "
                           f"{code}: the MoE lever is not the first one")
        elif d.code in ("gpus-idle", "low-power", "power-bound", "power-capped", "thermal-throttle"):
            out.append(f"power: {d.message}")
    return out
