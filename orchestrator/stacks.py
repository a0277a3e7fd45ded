"""A software stack, the software the server runs on (sglang with its extras, from the site's index), as a value.

Its identity is a hash over everything that decides what pip installs (the requirement with its extras, the
index options), so hosts with the same profile and index name the same stack and a changed pin, extra or index
is another stack. Each stack lives in a venv of its own (PATHS.stack_venv), built beside the venv the server
runs, so an upgrade never touches the running server's files and a rollback to a release on another stack needs
no pip run: the release's unit names its stack's interpreter. The profile's own venv (the single venv of earlier
deploys and of site templates) is adopted as the stack it holds, never rebuilt or removed. A stack's record
(PATHS.stack_record) is written only once its venv is complete, so a build cut short is no stack.

Pure: the steps read the listing through a fact (CT.stacks) and run the commands built here.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.layout import PATHS
from orchestrator.releases.documents import ReleaseLine, ReleaseMeta
from orchestrator.stack_lock import Lock


@dataclass(frozen=True)
class Stack:
    """What pip is asked for: the requirement (`sglang[srt]==0.5.23`) and the index options it resolves against."""

    requirement: str
    sglang_version: str
    index_options: str = ""
    #: Every distribution with its sha256 (`deploy lock`): installed with --require-hashes, part of the identity.
    lock: Lock | None = None

    @property
    def sha(self) -> str:
        """12 hex digits of sha256 over the identity: the stack's name on every host."""
        body: dict[str, str] = {"requirement": self.requirement, "index": self.index_options.strip()}
        if self.lock is not None:
            body["lock"] = self.lock.sha
        identity = json.dumps(body, sort_keys=True)
        return hashlib.sha256(identity.encode()).hexdigest()[:12]

    @property
    def venv(self) -> str:
        """Where a stack that is not adopted is built."""
        return PATHS.stack_venv(self.sha)


def requirement(version: str, extras: Iterable[str]) -> str:
    """The pip requirement for a pinned sglang with its extras: `sglang[srt]==0.5.23`."""
    names = ",".join(extras)
    return f"sglang[{names}]=={version}" if names else f"sglang=={version}"


@dataclass(frozen=True)
class StackRecord:
    """A stack present in the container: its record file, and what pip's record in its venv says now."""

    sha: str
    venv: str
    sglang_version: str
    requirement: str
    adopted: bool = False  # the profile's own venv: never rebuilt, never removed
    built_at: str = ""
    #: The sglang version pip's record in the venv names now (None: the venv is gone or holds no sglang).
    installed: str | None = None

    @property
    def usable(self) -> bool:
        return self.installed == self.sglang_version

    def record_json(self) -> str:
        return json.dumps({"sha": self.sha, "venv": self.venv, "sglang_version": self.sglang_version,
                           "requirement": self.requirement, "adopted": self.adopted, "built_at": self.built_at},
                          sort_keys=True)

    def to_meta(self) -> dict[str, Any]:
        """What a release records of the stack it runs (meta.json's `stack`)."""
        return {"sha": self.sha, "venv": self.venv, "sglang_version": self.sglang_version,
                "requirement": self.requirement}


def record_for(stack: Stack, venv: str, *, adopted: bool, built_at: str) -> StackRecord:
    return StackRecord(stack.sha, venv, stack.sglang_version, stack.requirement, adopted, built_at,
                       installed=stack.sglang_version)


def parse_stack_listing(text: str) -> dict[str, StackRecord]:
    """CT.stacks's lines (`RECORD JSON<TAB>installed version`) → records by sha; unreadable lines are skipped."""
    out: dict[str, StackRecord] = {}
    for line in text.splitlines():
        body, _, installed = line.partition("\t")
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            continue
        if not isinstance(data, dict) or not data.get("sha") or not data.get("venv"):
            continue
        out[str(data["sha"])] = StackRecord(
            str(data["sha"]), str(data["venv"]), str(data.get("sglang_version") or ""),
            str(data.get("requirement") or ""), bool(data.get("adopted")), str(data.get("built_at") or ""),
            installed.strip() or None)
    return out


def write_record_command(record: StackRecord) -> str:
    """Write a stack's record (after its venv is complete): temp file, then rename."""
    path = shlex.quote(PATHS.stack_record(record.sha))
    return (f"mkdir -p {shlex.quote(PATHS.stacks_dir)} && printf '%s\\n' {shlex.quote(record.record_json())} "
            f"> {path}.tmp && mv -f {path}.tmp {path}")


def build_command(stack: Stack, venv: str) -> str:
    """A fresh venv at `venv` (what a cut-short build left there removed first), then the requirement, or with a
    lock exactly its distributions (`--require-hashes --no-deps -r LOCK`); a failed install removes the venv."""
    q = shlex.quote(venv)
    return (f"rm -rf {q} && mkdir -p {shlex.quote(PATHS.stacks_dir)} && python3 -m venv {q} && "
            + pip_install_command(stack, venv) + f" || {{ rc=$?; rm -rf {q}; exit $rc; }}")


def pip_install_command(stack: Stack, venv: str) -> str:
    """`VENV/bin/pip install` of the stack: its requirement, or its lock (written next to its record first)."""
    pip = f"{shlex.quote(venv)}/bin/pip install --disable-pip-version-check --progress-bar off{stack.index_options}"
    if stack.lock is None:
        return f"{pip} {shlex.quote(stack.requirement)}"
    lock = shlex.quote(PATHS.stack_record(stack.sha).removesuffix(".json") + ".lock.txt")
    return (f"mkdir -p {shlex.quote(PATHS.stacks_dir)} && "
            f"printf '%s' {shlex.quote(stack.lock.requirements())} > {lock} && "
            f"{pip} --require-hashes --no-deps -r {lock}")


def release_stack_sha(meta: ReleaseMeta | None) -> str | None:
    stack = meta.stack if meta is not None else None
    return stack.sha if stack is not None and stack.sha else None


def protected_stacks(releases: Iterable[ReleaseLine | Mapping[str, Any]], current: str | None) -> set[str]:
    """The stacks of the current release and of the newest verified one (history lines: id, meta, verdict)."""
    rows = [line for r in releases if (line := ReleaseLine.of(r)) is not None and line.id]
    keep: set[str] = set()
    for row in rows:
        if row.id == current and (sha := release_stack_sha(row.meta)):
            keep.add(sha)
    verified = [r for r in rows if r.kept]
    if verified and (sha := release_stack_sha(max(verified, key=lambda r: str(r.id)).meta)):
        keep.add(sha)
    return keep


def prune_plan(records: Mapping[str, StackRecord], keep: int, protected: set[str]) -> list[StackRecord]:
    """The built stacks to remove: beyond the newest `keep`, never a protected one, never an adopted venv."""
    built = sorted((r for r in records.values() if not r.adopted), key=lambda r: r.built_at, reverse=True)
    return [r for r in built[keep:] if r.sha not in protected]


def prune_command(doomed: Iterable[StackRecord]) -> str:
    """Remove each record first (it stops being a stack), then its venv; only paths under the stacks dir."""
    parts = []
    for r in doomed:
        if r.adopted or r.venv != PATHS.stack_venv(r.sha):
            continue
        parts.append(f"rm -f {shlex.quote(PATHS.stack_record(r.sha))} && rm -rf {shlex.quote(r.venv)}")
    return " && ".join(parts) or "true"
