"""What is wrong with the router's live worker list, for `status group` and `router status` (issue 37 item 2). Pure.

Why: both used to exit 0 with the router down, with a worker URL that no inventory host has any more (a container
that moved to a new DHCP lease, the router still sending to the old, dead address) and with every listed worker
"healthy" by the router's cached flag while none served. A status that says "ready" then is wrong, so each of these
is a Problem with the command that repairs it, and the status exits non-zero (1; 3 when the router is down).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.router.serving import Answer, through_router


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the router's worker list, and the command that repairs it."""

    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "fix": self.fix}

    def text(self) -> str:
        return f"{self.what} (fix: {self.fix})"


def router_down(base: str, error: str) -> Problem:
    return Problem(f"router {base} is down or unreachable: {error}",
                   "start the router: `deploy up group G` (a managed router), or `systemctl start sglang-router` "
                   "where it runs; then `deploy router status`")


def problems(listed: Iterable[tuple[str, bool | None]], known: Mapping[str, str], answers: Mapping[str, Answer],
             *, group: str | None = None) -> list[Problem]:
    """The router's (url, is_healthy) list against the inventory's current worker URLs (host → url) and each
    listed worker's own answer: stale URLs first, then "no listed worker serves"."""
    pairs = list(listed)
    hosts = {url: name for name, url in known.items()}
    up = f"deploy up group {group}" if group else "deploy up group G"
    out = [Problem(f"the router lists {url}, which is no inventory host's current address (a container that moved "
                   "to another address, or a host no longer in the inventory): requests sent there fail",
                   f"`deploy router remove {url}`; then `deploy router add HOST` or `{up}` for the host that moved")
           for url, _healthy in pairs if url not in hosts]
    serving = [u for u, healthy in pairs if through_router(u, healthy, answers.get(u)).serving]
    if not serving:
        said = "; ".join(f"{u}: {through_router(u, h, answers.get(u)).said}" for u, h in pairs)
        out.append(Problem(f"no worker the router lists serves ({said or 'it lists none'}): requests through the "
                           "router fail", f"bring a host's server back (`deploy status host X`), then `{up}` or "
                                      "`deploy router add HOST`"))
    return out
