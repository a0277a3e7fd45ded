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
    #: systemd's ActiveState: "deactivating" while a stop (or a restart's stop half) waits for the process to exit,
    #: where real sglang answers /health 503 while requests drain. None: not reported.
    state: str | None = None
    #: systemd's NRestarts: the restarts systemd made itself (Restart=on-failure after a crash); a `systemctl
    #: restart` by hand or by another command does not count, which tells a crash from a restart under a tune.
    restarts: int | None = None

    @property
    def settled(self) -> bool:
        """The unit is running its process, not stopping or starting it."""
        return self.state in (None, "active")


def parse_server_process(text: str) -> ServerProcess:
    """`systemctl show`'s MainPID, ActiveState and NRestarts lines, a `--` line, then the argv one word a line."""
    lines = text.splitlines()
    cut = lines.index("--") if "--" in lines else len(lines)
    props = dict(line.partition("=")[::2] for line in lines[:cut])
    raw_pid, raw_restarts = props.get("MainPID", "").strip(), props.get("NRestarts", "").strip()
    pid = int(raw_pid) if raw_pid.isdigit() and int(raw_pid) > 0 else None
    return ServerProcess(pid, tuple(lines[cut + 1:]) if pid is not None else (),
                         state=props.get("ActiveState", "").strip() or None,
                         restarts=int(raw_restarts) if raw_restarts.isdigit() else None)


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
