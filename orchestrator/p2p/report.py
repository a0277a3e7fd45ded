"""What the P2P check saw on each side (host and container) and its verdict: the typed result the `verify_p2p` step
hands on in RunState and `deploy verify-p2p` prints. Here, below the steps, so the run state can name it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.p2p.parse import P2PMatrix
from orchestrator.p2p.verdict import P2PVerdict, TopoComparison
from orchestrator.parsers.topo import TopoMatrix


@dataclass(frozen=True)
class P2PView:
    where: str
    topo: TopoMatrix | None
    read: P2PMatrix | None
    write: P2PMatrix | None
    error: str = ""


@dataclass(frozen=True)
class P2PReport:
    container: P2PView
    host: P2PView
    verdict: P2PVerdict | None
    comparison: TopoComparison | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "container_error": self.container.error,
            "host_error": self.host.error,
            "container_topology": self.container.topo.to_dict() if self.container.topo else None,
            "host_topology": self.host.topo.to_dict() if self.host.topo else None,
            "matches_host": self.comparison.to_dict() if self.comparison else None,
        }
