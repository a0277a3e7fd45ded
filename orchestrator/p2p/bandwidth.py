"""Measured GPU-to-GPU copy bandwidth: the probe to ship, its output parser and the per-pair verdict.

`topo -p2p r` says whether P2P is *allowed*; only a timed copy says whether it is *fast*. A VM with passthrough can
report OK and still copy through host memory. The verdict compares each pair with what its link should give:

| link (topo -m)       | expected GB/s, one direction  | origin                                              |
|----------------------|-------------------------------|-----------------------------------------------------|
| NV# (bonded NVLinks) | # x NVLINK_GBPS_PER_LINK (20) | H200 NV18 capture: 378.5 GB/s = 21 GB/s per link    |
| PIX/PXB/PHB/NODE/SYS | PCIE_X16_GBPS[gen] x width/16 | Gen5 x16 ~50 (nvbandwidth ~54), Gen4 ~25, Gen3 ~12  |

A pair below MIN_FRACTION (50 %) of its expectation is `slow`; a pair where `can_access_peer` is false is
`no-peer` (the copy went through the host), whatever its speed.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.resources import module_source

NVLINK_GBPS_PER_LINK = 20.0
PCIE_X16_GBPS: dict[int, float] = {3: 12.0, 4: 25.0, 5: 50.0, 6: 100.0}
DEFAULT_PCIE_GEN = 4  # when the caller does not know the generation: the lower bar, so no false alarms
MIN_FRACTION = 0.5
PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")


class P2PProbeParseError(ValueError):
    """The probe's stdout holds no JSON document with `pairs`."""


class PairBandwidth(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    src: int
    dst: int
    can_access_peer: bool
    gbps: float = Field(alias="GBps")


class P2PProbeResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    n: int
    pairs: tuple[PairBandwidth, ...]
    torch_version: str | None = None
    device_names: tuple[str, ...] = ()
    size_mib: int | None = None
    iters: int | None = None


class PairVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    src: int
    dst: int
    gbps: float
    can_access_peer: bool
    link: str | None
    expected_gbps: float | None
    fraction: float | None
    status: Literal["ok", "slow", "no-peer", "unchecked"]
    message: str


class P2PBandwidthVerdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    pairs: tuple[PairVerdict, ...]
    summary: str
    min_fraction: float


def probe_script_source() -> str:
    """The probe's source text, to `pct push` / write into the container."""
    return module_source("orchestrator.p2p.probe")


def probe_argv(python: str, script_path: str, *, size_mib: int = 256, iters: int = 20) -> list[str]:
    """argv to run the shipped probe with the container venv's python; shlex.join it for the remote shell."""
    if size_mib < 1 or iters < 1:
        raise ValueError("size_mib and iters must be >= 1")
    return [python, script_path, "--size-mib", str(size_mib), "--iters", str(iters)]


def probe_command(python: str, script_path: str, *, size_mib: int = 256, iters: int = 20) -> str:
    return shlex.join(probe_argv(python, script_path, size_mib=size_mib, iters=iters))


def parse_p2p_probe(text: str) -> P2PProbeResult:
    """The JSON document in the probe's output; text around it (warnings printed by imports) is ignored."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\s*\{", text, flags=re.MULTILINE):
        start = text.index("{", m.start())
        try:
            doc, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict) and "pairs" in doc:
            if "n" not in doc:
                ids = {p.get("src") for p in doc["pairs"]} | {p.get("dst") for p in doc["pairs"]}
                doc["n"] = len(ids)
            return P2PProbeResult.model_validate(doc)
    raise P2PProbeParseError("no JSON document with 'pairs' in the P2P probe output")


def expected_gbps(link: str | None, *, pcie_gen: int | None = None, pcie_width: int | None = None) -> float | None:
    """What a healthy pair over `link` copies at, one direction; None for a link label we cannot rate."""
    if not link:
        return None
    m = re.fullmatch(r"NV(\d+)", link.strip())
    if m:
        return int(m.group(1)) * NVLINK_GBPS_PER_LINK
    if link.strip() in PCIE_LINKS:
        gen = pcie_gen if pcie_gen in PCIE_X16_GBPS else DEFAULT_PCIE_GEN
        width = pcie_width if pcie_width and pcie_width > 0 else 16
        return PCIE_X16_GBPS[gen] * min(width, 16) / 16.0
    return None


def p2p_bandwidth_verdict(
    result: P2PProbeResult,
    links: Mapping[tuple[int, int], str],
    *,
    pcie_gen: int | None = None,
    pcie_width: int | None = None,
    min_fraction: float = MIN_FRACTION,
) -> P2PBandwidthVerdict:
    """Rate every measured pair against its link's expectation.

    `links` maps (src, dst) to the `topo -m` label (`NV18`, `PIX`, `SYS`, ...); a missing (src, dst) falls back
    to (dst, src). `pcie_gen`/`pcie_width` are the GPUs' maximum link generation/width (`--query-gpu
    pcie.link.gen.max,pcie.link.width.max`; the current values drop at idle).
    """
    verdicts: list[PairVerdict] = []
    for p in result.pairs:
        link = links.get((p.src, p.dst)) or links.get((p.dst, p.src))
        exp = expected_gbps(link, pcie_gen=pcie_gen, pcie_width=pcie_width)
        frac = p.gbps / exp if exp else None
        status: Literal["ok", "slow", "no-peer", "unchecked"]
        where = f"GPU{p.src}->GPU{p.dst}"
        if not p.can_access_peer:
            status = "no-peer"
            msg = (f"{where}: peer access denied (copy went through host memory at {p.gbps:.1f} GB/s) — "
                   "P2P is off: a VM, ACS/IOMMU, or the driver blocks it")
        elif exp is None or frac is None:
            status = "unchecked"
            msg = f"{where}: {p.gbps:.1f} GB/s over link {link or 'unknown'} (no expectation for this link)"
        elif frac < min_fraction:
            status = "slow"
            msg = (f"{where}: {p.gbps:.1f} GB/s is {frac * 100:.0f} % of the ~{exp:.0f} GB/s expected over {link} "
                   f"(threshold {min_fraction * 100:.0f} %)")
        else:
            status = "ok"
            msg = f"{where}: {p.gbps:.1f} GB/s over {link} ({frac * 100:.0f} % of ~{exp:.0f} GB/s)"
        verdicts.append(PairVerdict(src=p.src, dst=p.dst, gbps=p.gbps, can_access_peer=p.can_access_peer,
                                    link=link, expected_gbps=exp, fraction=frac, status=status, message=msg))
    bad = [v for v in verdicts if v.status in ("slow", "no-peer")]
    if not verdicts:
        summary, ok = "no GPU pairs measured (fewer than two GPUs visible)", False
    elif bad:
        summary = (f"{len(bad)} of {len(verdicts)} GPU pairs fail: "
                   f"{sum(v.status == 'no-peer' for v in bad)} without peer access, "
                   f"{sum(v.status == 'slow' for v in bad)} below {min_fraction * 100:.0f} % of expected bandwidth")
        ok = False
    else:
        gb = [v.gbps for v in verdicts]
        summary = f"all {len(verdicts)} GPU pairs copy peer-to-peer at {min(gb):.1f}-{max(gb):.1f} GB/s"
        ok = True
    return P2PBandwidthVerdict(ok=ok, pairs=tuple(verdicts), summary=summary, min_fraction=min_fraction)
