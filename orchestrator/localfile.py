"""Reading a small local file (inventory YAML, `--flags FILE`, a secret file) without hanging or blowing up.

`Path.read_text` on a FIFO blocks until a writer comes, on `/dev/zero` (or a symlink to it) reads until memory
runs out, on a directory raises IsADirectoryError, and on Latin-1 bytes raises UnicodeDecodeError: each a hang or
a traceback. `read_text_file` opens the file without blocking, refuses anything but a regular file, reads at most
`max_bytes` (+1, to tell a larger file) and decodes UTF-8, raising ConfigError naming the file and the fix.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orchestrator.errors import ConfigError

#: No inventory, flag or secret file comes near this; a larger one is refused rather than read into memory.
MAX_FILE_BYTES = 8 * 1024 * 1024


def read_text_file(path: Path, what: str = "file", *, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes` bytes; anything else is a ConfigError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}",
                          fix="check the path and its permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise ConfigError(f"{what} {path} is {kind}, not a regular file", fix="name a regular file")
        data = b""
        while len(data) <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}",
                          fix="check the path and its permissions") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {path} is larger than {max_bytes:,} bytes", fix="name the right file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {exc.start})", fix="save the file as UTF-8") from None


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `path` whole or not at all (a temporary file beside it, then a rename), with exactly `mode`: a
    reader that watches the file (Prometheus' file_sd) never sees half of it, and a secret is never readable by
    others, not even for a moment (the mode is set before the first byte)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), mode)  # the umask narrowed O_CREAT's mode
        fh.write(text)
    os.replace(tmp, path)
