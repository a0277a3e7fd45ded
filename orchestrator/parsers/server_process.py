"""The running sglang process as the container reports it (facts.CT.server_process): its pid, then its argv.

Why: a tune benches one point's release after another, and a bench run must measure that release's server, not
one another command restarted or started with other flags in between (issue 38 item 2). The pid tells a restart,
the argv tells other flags; neither holds a secret (secrets reach sglang by `--config` FILE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerProcess:
    pid: int | None  # None: the unit has no running main process
    argv: tuple[str, ...] = ()


def parse_server_process(text: str) -> ServerProcess:
    lines = text.splitlines()
    first = lines[0].strip() if lines else ""
    pid = int(first) if first.isdigit() and int(first) > 0 else None
    return ServerProcess(pid, tuple(lines[1:]) if pid is not None else ())


def argv_difference(running: Sequence[str], expected: Sequence[str]) -> str | None:
    """None when the process runs exactly `expected`; else the words on either side only, for a message."""
    if tuple(running) == tuple(expected):
        return None
    extra = [w for w in running if w not in expected]
    missing = [w for w in expected if w not in running]
    if not extra and not missing:
        return "the same words in another order"
    return (f"it runs {' '.join(extra[:6]) or '(nothing more)'} where the release has "
            f"{' '.join(missing[:6]) or '(nothing more)'}")
