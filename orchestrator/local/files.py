"""Reading a small local file without hanging or blowing up, and writing one without writing through a link.

`Path.read_text` on a FIFO blocks until a writer comes, on `/dev/zero` (or a symlink to it) reads until memory
runs out, on a directory raises IsADirectoryError, and on Latin-1 bytes raises UnicodeDecodeError: each a hang or
a traceback. `read_text_file` opens the file without blocking, refuses anything but a regular file, reads at most
`max_bytes` (+1, to tell a larger file) and decodes UTF-8, raising ConfigError naming the file and the fix.

Writing: `Path.write_text` (and `savefig(path)`, `open(path, "w")`) follows a symbolic link at `path`, so a
`hosts.yaml -> /etc/something` in an inventory directory turned `deploy init --force` into a write outside it.
`write_file` never follows one: the bytes go to a new file beside `path` (created exclusively, which refuses a
link), which then replaces `path` itself; a link there is replaced, the file it points to stays as it was. It is
atomic too: a kill mid-write leaves the previous file. `open_no_follow` is for the files the tool keeps open
(locks, the ledger): a link there is refused with a ConfigError.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import stat
import tempfile
from pathlib import Path

from orchestrator.errors import ConfigError

#: No inventory, flag or secret file comes near this; a larger one is refused rather than read into memory.
MAX_FILE_BYTES = 8 * 1024 * 1024

#: A host name or run id as a file name (claim and run files of the state dir).
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def file_name(text: str) -> str:
    return _SAFE.sub("_", text)


def read_text_file(path: Path, what: str = "file", *, max_bytes: int = MAX_FILE_BYTES, private: bool = False) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes` bytes; anything else is a ConfigError. `private`
    (read_private_file): opened without following a link, and only when this user owns it and nobody else may
    write it."""
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (os.O_NOFOLLOW if private else 0)
        fd = os.open(path, flags)
    except OSError as exc:
        if private and exc.errno == errno.ELOOP:
            raise _link_refused(path, what) from None
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}",
                          fix="check the path and its permissions") from None
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
            raise ConfigError(f"{what} {path} is {kind}, not a regular file", fix="name a regular file")
        why = foreign_or_open(st) if private else None
        if why is not None:
            raise ConfigError(f"{what} {path} is {why}: deploy reads only its own files from its state directory",
                              fix=f"remove it (rm {shlex.quote(str(path))}) if you did not write it; deploy writes "
                                  "its files 0600")
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


def foreign_or_open(st: os.stat_result) -> str | None:
    """Why a file or directory of this machine's state may have been written by someone else (None: it is this
    user's and nobody else may write it): owned by another user, or writable by the group or by others."""
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} (mode {st.st_mode & 0o7777:o})"
    return None


def read_private_file(path: Path, what: str = "file", *, max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """The text of a file of this machine's state (the state dir: caches, records), None when it does not exist.

    Why: what the tool kept for itself is trusted as if the tool had just computed it (a cached inventory, the
    hosts a watch cordoned), so a file another local user planted or could have changed must not be read. The
    file is opened without following a link (O_NOFOLLOW), and must be a regular file owned by this user that
    neither its group nor others may write; anything else is a ConfigError naming the file and the fix. Callers
    for whom the file is only a cache treat that error as a miss."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        pass  # read_text_file words it
    return read_text_file(path, what, max_bytes=max_bytes, private=True)


def private_state_dir() -> Path:
    """The state directory (paths.state_dir), refused (ConfigError, with the fix) when another local user could
    write into it: what the tool reads back from there (a cached inventory, a watch's cordoned hosts) is trusted as
    if the tool had just computed it."""
    from orchestrator.local.paths import STATE_ENV, state_dir, state_dir_problem

    path = state_dir()
    problem = state_dir_problem(path)
    if problem is not None:
        raise ConfigError(f"state directory {path}: {problem}; another local user could plant files deploy trusts "
                          "there (a cached inventory, a watch's record)",
                          fix=f"use a directory only you can write: `export {STATE_ENV}=~/.local/state/deploy` (the "
                              "default), or `chmod 700` it and the folders above it if they are yours")
    return path


def write_file(path: Path, data: str | bytes, *, mode: int = 0o644) -> Path:
    """Replace `path` with `data` (str as UTF-8) atomically, with `mode`; a symbolic link at `path` is replaced
    itself, never written through. OSError is the caller's to word (it knows what the file is)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    # mkstemp opens O_CREAT|O_EXCL (O_NOFOLLOW too): a name that exists, a link included, is never reused.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def open_no_follow(path: Path, flags: int, mode: int = 0o600, *, what: str = "file") -> int:
    """`os.open(path, flags, mode)` that refuses a symbolic link at `path` (ConfigError) instead of following it:
    for the files the tool keeps open and writes in place (claims, run markers, the ledger)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refused(path, what) from None
        raise


def refuse_link(path: Path, what: str = "file") -> None:
    """ConfigError when `path` is a symbolic link: for a file another program (SQLite) opens and would follow."""
    if path.is_symlink():
        raise _link_refused(path, what)


def _link_refused(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{what} {path} is a symbolic link; deploy does not write through links",
                       fix=f"remove the link (rm {shlex.quote(str(path))}); deploy makes the file again")
