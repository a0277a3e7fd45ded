"""PCIe links judged under the load a command itself generates (pure): `verify-p2p --bandwidth` (the copy matrix)
and the throughput step (bench_serving), each sampled by `nvidia-smi --query-gpu … -lms` running alongside the
load in the same round trip.

Why a window and not a snapshot: idle RTX PRO 6000 links renegotiate all the time (32 -> 5 -> 2.5 GT/s,
local-inference-lab/rtx6kpro#88), so a reading taken while a GPU idles says nothing; under load a healthy link
trains to its capability. A GPU's link is judged on its **best** reading while it was loaded: a link that reached
its capability at least once under load is healthy (it only downshifted while idle between copies); one that never
did is stuck below it (the Gen2 x16 link of #88, held for 3.5 hours of full load with no error logged) and fails,
naming the GPU and its slot (the bus id). A GPU that was never loaded in the window is not judged, and said so.

"Loaded": a sample at `min_util_pct` or more of `utilization.gpu` (the server's kernels, for the bench). A copy
matrix keeps every GPU's link busy in turn but may not raise `utilization.gpu` (copies run on the copy engines,
not as kernels), so its caller passes `min_util_pct=None`: every sample of a probe that completed counts, and the
best reading is taken over the whole window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.hardware.smi_health import norm_bus
from orchestrator.parsers.gpu_query import Sample, parse_query_gpu, sampler_argv
from orchestrator.parsers.hostfacts import PcieLink

#: The link sampler's fields (noheader, nounits), in this order.
LINK_SAMPLER_FIELDS: tuple[str, ...] = ("timestamp", "index", "pci.bus_id", "pcie.link.gen.current",
                                        "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
                                        "utilization.gpu")
#: How often the sampler reads every GPU's link while the load runs.
LINK_SAMPLE_MS = 100
SOURCE = "local-inference-lab/rtx6kpro#88 (a link stuck at Gen2 under load, no error logged)"
LinkStatus = Literal["ok", "fail", "not-loaded"]


def link_sampler_argv(interval_ms: int = LINK_SAMPLE_MS) -> list[str]:
    """`nvidia-smi --query-gpu=<LINK_SAMPLER_FIELDS> --format=csv,noheader,nounits -lms <ms>` as an argv."""
    return sampler_argv(interval_ms, LINK_SAMPLER_FIELDS)


@dataclass(frozen=True)
class LinkSample:
    """One GPU's link at one instant, with its capability and its load then."""

    gpu: int
    bus_id: str
    current: PcieLink
    max: PcieLink
    util_pct: int | None


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, float) else None


def parse_link_samples(text: str) -> tuple[LinkSample, ...]:
    """The link sampler's CSV (LINK_SAMPLER_FIELDS, no header); a torn last line is dropped, rows without a link
    reading (`[N/A]`) are skipped. Raises GpuQueryParseError on a row of another shape."""
    out = []
    for s in parse_query_gpu(text, LINK_SAMPLER_FIELDS, drop_torn_tail=True):
        gen, gen_max = _int(s.values.get("pcie.link.gen.current")), _int(s.values.get("pcie.link.gen.max"))
        width, width_max = _int(s.values.get("pcie.link.width.current")), _int(s.values.get("pcie.link.width.max"))
        bus = s.values.get("pci.bus_id")
        if gen is None or gen_max is None or width is None or width_max is None or not isinstance(bus, str):
            continue
        out.append(LinkSample(s.gpu, norm_bus(bus), PcieLink(gen, width), PcieLink(gen_max, width_max),
                              _int(s.values.get("utilization.gpu"))))
    return tuple(out)


#: The bench's one-shot query of each GPU's slot, beside its samplers (`--format=csv,noheader`).
BUS_FIELDS: tuple[str, ...] = ("index", "pci.bus_id")


def bus_query_argv() -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(BUS_FIELDS)}", "--format=csv,noheader"]


def parse_bus_ids(text: str) -> dict[int, str]:
    """`0, 00000000:85:00.0` per GPU -> {0: "00000000:85:00.0"}; GpuQueryParseError on another shape."""
    return {s.gpu: norm_bus(bus) for s in parse_query_gpu(text, BUS_FIELDS, drop_torn_tail=True)
            if isinstance(bus := s.values.get("pci.bus_id"), str)}


def samples_from_telemetry(samples: Sequence[Sample], static: Sequence[Sample],
                           buses: Mapping[int, str]) -> tuple[LinkSample, ...]:
    """The bench sampler's rows (`pcie.link.gen.current`, `pcie.link.width.current`, `utilization.gpu` each tick)
    with the static query's capability per GPU (`pcie.link.gen.max`, `pcie.link.width.max`) and its slot from
    `buses` (`GPU N` where that query gave none); rows of a GPU the static query does not describe are skipped."""
    caps: dict[int, tuple[str, PcieLink]] = {}
    for s in static:
        gen, width = _int(s.values.get("pcie.link.gen.max")), _int(s.values.get("pcie.link.width.max"))
        if gen is not None and width is not None:
            caps[s.gpu] = (buses.get(s.gpu, f"GPU {s.gpu}"), PcieLink(gen, width))
    out = []
    for s in samples:
        if s.source != "query" or s.gpu not in caps:
            continue
        gen, width = _int(s.values.get("pcie.link.gen.current")), _int(s.values.get("pcie.link.width.current"))
        if gen is None or width is None:
            continue
        bus, cap = caps[s.gpu]
        out.append(LinkSample(s.gpu, bus, PcieLink(gen, width), cap, _int(s.values.get("utilization.gpu"))))
    return tuple(out)


def _rank(link: PcieLink) -> tuple[int, int]:
    return link.gen, link.width


@dataclass(frozen=True)
class LinkUnderLoad:
    """One GPU's link over the load window: its best reading while loaded against its capability."""

    gpu: int
    bus_id: str
    max: PcieLink
    best: PcieLink | None  # None: never loaded in the window
    samples: int
    loaded: int
    below: int  # loaded samples below the capability

    @property
    def status(self) -> LinkStatus:
        if self.best is None:
            return "not-loaded"
        return "fail" if self.best.below(self.max) else "ok"

    @property
    def name(self) -> str:
        return f"GPU {self.gpu} (slot {self.bus_id})"

    def message(self, load: str) -> str:
        if self.best is None:
            return f"{self.name}: not judged, never loaded during {load} ({self.samples} samples)"
        if self.status == "ok":
            return (f"{self.name}: {self.best} under {load}, its capability {self.max} "
                    f"({self.loaded} samples under load)")
        return (f"{self.name}: PCIe link {self.best} under {load}, below its capability {self.max}: best of "
                f"{self.loaded} samples under load, {self.below} of them below it")

    def to_dict(self, load: str) -> dict[str, Any]:
        return {"gpu": self.gpu, "bus_id": self.bus_id, "status": self.status, "max": str(self.max),
                "best": str(self.best) if self.best is not None else None, "samples": self.samples,
                "loaded": self.loaded, "below": self.below, "message": self.message(load)}


@dataclass(frozen=True)
class LinkLoadVerdict:
    """Every sampled GPU's link over one load window; fails when a loaded GPU's link never reached its capability."""

    load: str  # "the P2P copy matrix", "bench_serving"
    gpus: tuple[LinkUnderLoad, ...]
    min_util_pct: int | None

    @property
    def failures(self) -> tuple[LinkUnderLoad, ...]:
        return tuple(g for g in self.gpus if g.status == "fail")

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def samples(self) -> int:
        return sum(g.samples for g in self.gpus)

    def summary(self) -> str:
        if not self.gpus:
            return f"PCIe links: no sample during {self.load}: not judged"
        judged = [g for g in self.gpus if g.status != "not-loaded"]
        if self.failures:
            return ("PCIe links under load FAIL: " + "; ".join(g.message(self.load) for g in self.failures)
                    + " (a reboot retrains it; if it stays, reseat the GPU or its riser)")
        return (f"PCIe links under load: {len(judged)} of {len(self.gpus)} GPU(s) at their capability during "
                f"{self.load} ({self.samples} samples)")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "load": self.load, "min_util_pct": self.min_util_pct, "samples": self.samples,
                "summary": self.summary(), "source": SOURCE, "gpus": [g.to_dict(self.load) for g in self.gpus]}


def judge_links_under_load(samples: Sequence[LinkSample], *, load: str,
                           min_util_pct: int | None) -> LinkLoadVerdict:
    """Per GPU: its best reading among the loaded samples (`min_util_pct` or more of utilization; None: every
    sample) against its capability. Idle samples never count, so an idle downshift never fails."""
    by_gpu: dict[int, list[LinkSample]] = {}
    for s in samples:
        by_gpu.setdefault(s.gpu, []).append(s)
    out = []
    for gpu, rows in sorted(by_gpu.items()):
        cap = max((r.max for r in rows), key=_rank)
        loaded = [r for r in rows if min_util_pct is None or (r.util_pct is not None and r.util_pct >= min_util_pct)]
        best = max((r.current for r in loaded), key=_rank, default=None)
        out.append(LinkUnderLoad(gpu, rows[-1].bus_id, cap, best, len(rows), len(loaded),
                                 sum(1 for r in loaded if r.current.below(cap))))
    return LinkLoadVerdict(load, tuple(out), min_util_pct)


def framed(text: str, marker: str, name: str) -> str | None:
    """The lines between `MARKER begin NAME` and `MARKER end NAME` (None when the frame is absent or torn: the
    script did not get that far)."""
    lines = text.splitlines()
    try:
        start = lines.index(f"{marker} begin {name}")
        end = lines.index(f"{marker} end {name}", start + 1)
    except ValueError:
        return None
    return "\n".join(lines[start + 1:end]) + "\n"
