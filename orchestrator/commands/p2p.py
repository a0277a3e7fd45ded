"""`deploy verify-p2p host X` on one host as a typed function: topology, P2P matrix and verdict (one round trip),
optionally the GPU-to-GPU copy matrix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.commands.result import ViewResult
from orchestrator.engine.runner import run_playbook
from orchestrator.engine.state import RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import CheckFailed
from orchestrator.inventory.models import Host, Inventory
from orchestrator.p2p.report import P2PReport
from orchestrator.p2p.verdict import P2PVerdict


@dataclass(frozen=True)
class P2PRequest:
    host: Host
    bandwidth: bool = False
    size_mib: int = 256
    tofu: bool = False


@dataclass(frozen=True)
class P2PResult(ViewResult):
    """The host's and the container's view, the verdict on the primary one, and the copy matrix's verdict
    (`bandwidth`, None unless asked). It passes when the verdict, the topology match and the copies pass."""

    host: Host
    p2p: P2PReport
    bandwidth: dict[str, Any] | None

    @property
    def verdict(self) -> P2PVerdict:
        assert self.p2p.verdict is not None  # p2p_host refuses a run without one
        return self.p2p.verdict

    @property
    def ok(self) -> bool:
        comparison, bw = self.p2p.comparison, self.bandwidth
        return self.verdict.ok and (comparison is None or comparison.same) and (bw is None or bw.get("ok", True))

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"ok": self.ok, "host": self.host.name, **self.p2p.to_dict(), "totals": self.totals}
        if self.bandwidth is not None:
            payload["bandwidth"] = self.bandwidth
        return payload

    def detail(self) -> str:
        verdict, comparison = self.verdict, self.p2p.comparison
        text = f"P2P {verdict.status} ({verdict.p2p}, {len(verdict.gpus)} GPUs)"
        if comparison is not None and not comparison.same:
            text += "; container topology differs from the host's"
        links = (self.bandwidth or {}).get("links")
        if isinstance(links, dict) and not links.get("ok", True):
            text += "; " + "; ".join(f"GPU {g['gpu']} ({g['bus_id']}) link {g['best']} of {g['max']} under load"
                                     for g in links.get("gpus", []) if g.get("status") == "fail")
        return text


def p2p_host(inventory: Inventory, request: P2PRequest) -> P2PResult:
    """Read and judge one host's P2P; a run that read no topology raises CheckFailed."""
    host = request.host
    options = RunOptions(allow_no_p2p=True, tofu=request.tofu, command="deploy verify-p2p")
    inputs = RunInputs(want_bandwidth=request.bandwidth, probe_size_mib=request.size_mib)
    report = run_playbook("verify-p2p", host, inventory, options, inputs=inputs)
    p2p = report.state.p2p_report
    if p2p is None or p2p.verdict is None:
        raise CheckFailed("no topology could be read", host=host.name, step="verify_p2p")
    return P2PResult(report, host, p2p, report.state.bandwidth)
