"""Where a bug's traceback goes: a 0600 file under the state directory, secrets redacted.

An exception that no layer turned into a DeployError is a bug in deploy. The terminal and the --json document get
one line that names this file, so the traceback reaches a bug report and never a user's screen.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

from orchestrator.local.paths import state_dir
from orchestrator.redact import redact_text


def save_traceback(exc: BaseException) -> Path | None:
    """Write `exc`'s traceback to STATE/crashes/<time>-<pid>-<n>.txt (0600, in a 0700 directory); None when the
    state directory cannot be written (the caller then says how to see it instead)."""
    try:
        crashes = state_dir() / "crashes"
        crashes.mkdir(mode=0o700, parents=True, exist_ok=True)
        stem = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for n in range(100):
            path = crashes / (f"{stem}.txt" if n == 0 else f"{stem}-{n}.txt")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(redact_text("".join(traceback.format_exception(exc))))
            return path
    except OSError:
        return None
    return None


def describe_bug(exc: BaseException) -> tuple[str, Path | None]:
    """The one line that names a bug (`internal error in deploy: KeyError: 'x'`), and the file that now holds its
    traceback (None when none could be written)."""
    return f"internal error in deploy: {type(exc).__name__}: {exc}", save_traceback(exc)
