"""Which of the router's workers really serve, asked of each worker itself (issue 37 items 1 and 2).

Why not the router's `is_healthy`: sglang-router 0.3.2 (and smg, whose checks default to every 60 s) keeps a
worker healthy in `GET /workers` long after its server stopped; `deploy router remove` trusted that flag and
removed the only serving worker. So before a worker is taken out, and when a status says "healthy", every listed
worker is asked its own `GET /health` at its container address, with its key. A worker serves when the router
lists it not unhealthy (it would not route to it otherwise) and its own /health answers 200.

`ask` does the I/O (in parallel); `judge` and `Removal` are pure, so the decision is tested on plain values. The
router's worker list comes in as (url, healthy) pairs, so any router adapter (sglang-router, smg) can feed it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.remote.http import Transport
from orchestrator.router.checks import health_error

#: Above sglang's own SGLANG_HEALTH_CHECK_TIMEOUT (20 s): a /health that is slow under load is not read as down.
HEALTH_TIMEOUT_S = 25.0


@dataclass(frozen=True)
class Answer:
    """What one worker answered: `serving` and the words of it (the evidence shown to the operator)."""

    url: str
    serving: bool
    said: str

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "serving": self.serving, "answered": self.said}


def ask(http: Transport, urls: Iterable[str], keys: Mapping[str, str | None], default_key: str | None = None, *,
        timeout_s: float = HEALTH_TIMEOUT_S) -> dict[str, Answer]:
    """Each worker's own `GET /health`, with its key (else `default_key`: one key for the fleet), in parallel."""
    wanted = list(dict.fromkeys(urls))
    if not wanted:
        return {}

    def one(url: str) -> Answer:
        error = health_error(http, url, keys.get(url, default_key), timeout_s=timeout_s)
        return Answer(url, error is None, error or "GET /health answered 200")

    with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
        return dict(zip(wanted, pool.map(one, wanted), strict=True))


def through_router(url: str, router_healthy: bool | None, own: Answer | None) -> Answer:
    """Pure: whether a listed worker serves traffic through the router (both the router's flag and its own word)."""
    said = own.said if own is not None else "not asked"
    if router_healthy is False:
        return Answer(url, False, f"the router lists it unhealthy; {said}")
    return own if own is not None else Answer(url, False, said)


@dataclass(frozen=True)
class Removal:
    """Pure: what taking `url` out of the router would leave, from the router's list and each worker's answer."""

    url: str
    me: Answer | None  # None: the router does not list it
    others: tuple[Answer, ...]

    @property
    def serving_others(self) -> list[Answer]:
        return [a for a in self.others if a.serving]

    @property
    def sick(self) -> list[Answer]:
        return [a for a in self.others if not a.serving]

    @property
    def protects_traffic(self) -> bool:
        """Removing it would leave no serving worker while it serves itself (nothing to protect otherwise)."""
        return not self.serving_others and self.me is not None and self.me.serving

    def evidence(self) -> str:
        """Each other worker: its URL and what it answered (the words of a refusal)."""
        if not self.others:
            return "the router lists no other worker"
        return "; ".join(f"{a.url}: {a.said}" for a in self.others)

    def details(self) -> dict[str, object]:
        return {"workers": [a.to_dict() for a in self.others],
                **({"self": self.me.to_dict()} if self.me is not None else {})}


def judge(url: str, listed: Iterable[tuple[str, bool | None]], answers: Mapping[str, Answer]) -> Removal:
    """Pure: the Removal of `url` given the router's (url, is_healthy) list and the workers' own answers."""
    me: Answer | None = None
    others: list[Answer] = []
    for u, healthy in listed:
        answer = through_router(u, healthy, answers.get(u))
        if u == url:
            me = answer
        else:
            others.append(answer)
    return Removal(url, me, tuple(others))
