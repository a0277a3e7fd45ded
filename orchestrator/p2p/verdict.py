"""P2P policy: is the GPU set used by tensor parallelism able to talk peer-to-peer, and does the container see the
host's topology?

Why: TP=8 all-reduce runs over PCIe P2P on RTX PRO 6000 (no NVLink). A VM with PCIe passthrough shows a flat
topology (every pair `PHB` behind a virtual host bridge) and the driver denies P2P (`CNS`), which is why the
GPUs go into an LXC container, which sees the bare-metal tree. Pairs that cross sockets (`SYS`) work but are
slower and NCCL only uses P2P there with `NCCL_P2P_LEVEL=SYS`: a warning, not a failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.p2p.parse import P2PMatrix, P2PStatus
from orchestrator.parsers.topo import TopoMatrix, link_rank

__all__ = [
    "UNKNOWN_TOPOLOGY_ONLY",
    "VM_FIX",
    "VM_REASON",
    "LinkDiff",
    "P2PVerdict",
    "PairVerdict",
    "TopoComparison",
    "compare_topologies",
    "p2p_verdict",
]

PairStatus = Literal["pass", "warn", "fail", "unknown"]
Overall = Literal["pass", "warn", "fail"]

UNKNOWN_TOPOLOGY_ONLY = "unknown (topology only)"
VM_REASON = (
    "GPUs are behind a flat virtual PCIe host bridge: this is a VM with PCIe passthrough; P2P is denied"
)
VM_FIX = (
    "move the GPUs to an LXC container on the host (deploy up does this), or give the VM NVIDIA's P2P clique "
    "(QEMU vfio-pci x-nv-gpudirect-clique=N)"
)
SYS_FIX = "set NCCL_P2P_LEVEL=SYS so NCCL uses P2P across sockets instead of falling back to shared memory"

_STATUS_REASON: dict[P2PStatus, str] = {
    P2PStatus.CNS: "chipset not supported: the driver refuses P2P through this PCIe root complex",
    P2PStatus.GNS: "GPU not supported: this GPU model has P2P disabled",
    P2PStatus.TNS: "topology not supported: the PCIe path between these GPUs does not allow P2P",
    P2PStatus.NS: "not supported on this path",
    P2PStatus.DR: "disabled by regkey: an NVIDIA driver registry key turned P2P off",
    P2PStatus.U: "unknown: the driver could not determine the P2P status",
}
_STATUS_FIX: dict[P2PStatus, str] = {
    P2PStatus.CNS: "on bare metal/LXC check IOMMU (amd_iommu=off iommu=off or iommu=pt) and ACS redirect "
    "(deploy doctor); in a VM see the VM fix",
    P2PStatus.GNS: "this GPU cannot do P2P: run with NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce",
    P2PStatus.TNS: "keep tensor-parallel groups on GPUs with a P2P-capable path, or accept the SHM fallback",
    P2PStatus.NS: "check IOMMU (amd_iommu=off iommu=off or iommu=pt) and ACS redirect (deploy doctor)",
    P2PStatus.DR: "remove the P2P setting from NVreg_RegistryDwords in /etc/modprobe.d/*.conf "
    "(see /proc/driver/nvidia/params), update-initramfs -u and reboot",
    P2PStatus.U: "check `dmesg | grep NVRM` and that every GPU is healthy (nvidia-smi -q)",
}


@dataclass(frozen=True)
class PairVerdict:
    """One unordered GPU pair. `read`/`write` are the worse of the two directions; None when not measured."""

    a: str
    b: str
    link: str
    read: P2PStatus | None
    write: P2PStatus | None
    status: PairStatus
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "a": self.a,
            "b": self.b,
            "link": self.link,
            "read": self.read.value if self.read else None,
            "write": self.write.value if self.write else None,
            "status": self.status,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class P2PVerdict:
    """Overall verdict for the TP GPU set; `p2p` is the P2P part alone (`unknown (topology only)` without
    p2p matrices)."""

    status: Overall
    p2p: str
    vm_passthrough: bool
    gpus: tuple[str, ...]
    reasons: tuple[str, ...]
    fixes: tuple[str, ...]
    pairs: tuple[PairVerdict, ...]

    @property
    def ok(self) -> bool:
        return self.status != "fail"

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status,
            "p2p": self.p2p,
            "vm_passthrough": self.vm_passthrough,
            "gpus": list(self.gpus),
            "reasons": list(self.reasons),
            "fixes": list(self.fixes),
            "pairs": [p.to_dict() for p in self.pairs],
        }


def _combined(matrix: P2PMatrix | None, a: str, b: str) -> P2PStatus | None:
    """Worse of a→b and b→a (first non-OK); a GPU missing from the matrix counts as Unknown."""
    if matrix is None:
        return None
    ab = matrix.status.get((a, b), P2PStatus.U)
    ba = matrix.status.get((b, a), P2PStatus.U)
    return ab if ab != P2PStatus.OK else ba


def _worse_link(topo: TopoMatrix, a: str, b: str) -> str:
    ab, ba = topo.link(a, b), topo.link(b, a)
    return ab if link_rank(ab) >= link_rank(ba) else ba


def _pair_verdict(topo: TopoMatrix, read: P2PMatrix | None, write: P2PMatrix | None, a: str, b: str) -> PairVerdict:
    link = _worse_link(topo, a, b)
    r, w = _combined(read, a, b), _combined(write, a, b)
    reasons: list[str] = []
    status: PairStatus
    bad = [(cap, s) for cap, s in (("read", r), ("write", w)) if s is not None and s != P2PStatus.OK]
    if bad:
        status = "fail"
        reasons += [f"P2P {cap} {s.value}: {_STATUS_REASON[s]}" for cap, s in bad]
    elif r is None or w is None:
        status = "unknown"
        missing = " and ".join(cap for cap, s in (("read", r), ("write", w)) if s is None)
        reasons.append(f"P2P {missing} not checked ({UNKNOWN_TOPOLOGY_ONLY})")
    else:
        status = "pass"
    if link == "SYS" and status != "fail":
        reasons.append("crosses the inter-socket link (SYS): slower, NCCL needs NCCL_P2P_LEVEL=SYS for P2P")
        if status == "pass":
            status = "warn"
    return PairVerdict(a=a, b=b, link=link, read=r, write=w, status=status, reasons=tuple(reasons))


def _pairs_text(pairs: Sequence[PairVerdict], limit: int = 6) -> str:
    names = [f"{p.a}-{p.b}" for p in pairs]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def p2p_verdict(
    topo: TopoMatrix,
    read: P2PMatrix | None = None,
    write: P2PMatrix | None = None,
    tp_gpus: Sequence[str | int] | None = None,
    env: Mapping[str, str] | None = None,
) -> P2PVerdict:
    """Judge P2P for the tensor-parallel GPU set (default: every GPU in the matrix).

    pass: every pair reads and writes OK. warn: OK but some pairs cross sockets (SYS), or P2P was not measured.
    fail: any pair is not OK for read or write; a flat all-PHB topology with CNS/NS is named as a VM.
    `env`: the server's environment (the profile's `env:`); where it already sets NCCL_P2P_LEVEL=SYS, that fix
    is not advised again.
    """
    gpus = tuple(topo.gpu_name(g) for g in tp_gpus) if tp_gpus is not None else topo.gpus
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"tensor-parallel GPU set repeats a GPU: {list(gpus)}")
    for m, cap in ((read, "read"), (write, "write")):
        if m is not None and m.kind is not None and m.kind != cap:
            raise ValueError(f"the {cap} P2P matrix given is a {m.kind} matrix")
    pairs = tuple(_pair_verdict(topo, read, write, a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :])
    measured = read is not None or write is not None

    flat_phb = len(pairs) > 0 and all(p.link == "PHB" for p in pairs)
    denied = {P2PStatus.CNS, P2PStatus.NS}
    vm = (
        flat_phb
        and measured
        and all(s in denied for p in pairs for s in (p.read, p.write) if s is not None)
    )

    reasons: list[str] = []
    fixes: list[str] = []
    failed = [p for p in pairs if p.status == "fail"]
    if vm:
        reasons.append(VM_REASON)
        fixes.append(VM_FIX)
    elif failed:
        groups: dict[tuple[str, P2PStatus], list[PairVerdict]] = {}
        for p in failed:
            for cap, s in (("read", p.read), ("write", p.write)):
                if s is not None and s != P2PStatus.OK:
                    groups.setdefault((cap, s), []).append(p)
        for (cap, s), members in groups.items():
            reasons.append(f"P2P {cap} {s.value} ({_STATUS_REASON[s]}) on {len(members)} pair(s): "
                           f"{_pairs_text(members)}")
            if _STATUS_FIX[s] not in fixes:
                fixes.append(_STATUS_FIX[s])
    if not measured:
        reasons.append(f"P2P {UNKNOWN_TOPOLOGY_ONLY}: no topo -p2p matrices; run nvidia-smi topo -p2p r and w")
        if flat_phb and len(gpus) > 1:
            reasons.append("every GPU pair is PHB (flat): typical of a VM with PCIe passthrough, where P2P is "
                           "denied")
            fixes.append(VM_FIX)
    elif not failed and any(p.status == "unknown" for p in pairs):
        reasons.append(f"P2P partly {UNKNOWN_TOPOLOGY_ONLY}: only one of the read/write matrices was given")
    sys_pairs = [p for p in pairs if p.link == "SYS" and p.status != "fail"]
    if sys_pairs:
        reasons.append(f"{len(sys_pairs)} pair(s) cross the inter-socket link (SYS): P2P works but is slower: "
                       f"{_pairs_text(sys_pairs)}")
        if str((env or {}).get("NCCL_P2P_LEVEL", "")).upper() == "SYS":
            reasons.append("the server's environment already sets NCCL_P2P_LEVEL=SYS, so NCCL uses P2P there")
        else:
            fixes.append(SYS_FIX)

    status: Overall
    if failed:
        status = "fail"
    elif any(p.status in ("warn", "unknown") for p in pairs):
        status = "warn"
    else:
        status = "pass"
    p2p_part = (
        UNKNOWN_TOPOLOGY_ONLY if not measured
        else "fail" if failed
        else "pass" if read is not None and write is not None
        else "partial"
    )
    return P2PVerdict(
        status=status,
        p2p=p2p_part,
        vm_passthrough=vm,
        gpus=gpus,
        reasons=tuple(reasons),
        fixes=tuple(fixes),
        pairs=pairs,
    )


@dataclass(frozen=True)
class LinkDiff:
    a: str
    b: str
    host: str | None
    container: str | None


@dataclass(frozen=True)
class TopoComparison:
    """Whether the container sees the host's matrix: the LXC guarantee a VM cannot give."""

    same: bool
    differing: tuple[LinkDiff, ...]
    only_on_host: tuple[str, ...]
    only_in_container: tuple[str, ...]

    def describe(self) -> str:
        if self.same:
            return "the container sees the same GPU topology as the host"
        parts: list[str] = []
        if self.only_on_host:
            parts.append(f"GPUs missing in the container: {', '.join(self.only_on_host)}")
        if self.only_in_container:
            parts.append(f"GPUs only in the container: {', '.join(self.only_in_container)}")
        if self.differing:
            shown = ", ".join(f"{d.a}-{d.b} host {d.host} container {d.container}" for d in self.differing[:6])
            parts.append(f"{len(self.differing)} link(s) differ: {shown}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {
            "same": self.same,
            "differing": [{"a": d.a, "b": d.b, "host": d.host, "container": d.container} for d in self.differing],
            "only_on_host": list(self.only_on_host),
            "only_in_container": list(self.only_in_container),
            "summary": self.describe(),
        }


def compare_topologies(host: TopoMatrix, container: TopoMatrix) -> TopoComparison:
    """Compare GPU↔GPU links of two matrices (ordered pairs, GPUs present in both). Affinity is not
    compared: a container cpuset may legitimately narrow it."""
    common = [g for g in host.gpus if g in container.gpus]
    diffs = tuple(
        LinkDiff(a, b, host.link(a, b), container.link(a, b))
        for a in common
        for b in common
        if a != b and host.link(a, b) != container.link(a, b)
    )
    only_host = tuple(g for g in host.gpus if g not in container.gpus)
    only_ct = tuple(g for g in container.gpus if g not in host.gpus)
    return TopoComparison(
        same=not diffs and not only_host and not only_ct,
        differing=diffs,
        only_on_host=only_host,
        only_in_container=only_ct,
    )
