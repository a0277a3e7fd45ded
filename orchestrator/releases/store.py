"""Releases live on the target, inside the container, so every operator machine sees the same history.

/var/lib/deploy/releases/<id>/   sglang.service, sglang.env (0600), secrets.yaml (0600) and logging.json
                                 (with an API key),
                                 flags.json, meta.json, and later
                                 server_info.json, bench.jsonl, verdict.json,
                                 boot.jsonl (the boot ledger: each start's phases)
/var/lib/deploy/current          symlink → releases/<id>

Every install is a new release (its own id), so each attempt keeps its own verdict and bench files. Activation
prunes to the newest `keep_releases`, but never the current release nor the newest verified one (verdict `kept`):
a run of failed rolls cannot delete the last good state.

Installing is one script: write the release dir under a temporary name and rename it, stage every file next to
its target (temp files) and only then rename them all into place and swap the `current` symlink, daemon-reload,
restart. A failure while staging (a full disk) leaves every installed file as it was. A kill at any point
leaves either the old or the new complete state; re-running converges. This module only builds scripts and
parses listings (pure); steps run them through the container adapter. The scripts themselves are shipped files
(orchestrator/scripts/*.sh.j2); the paths come from the one `ContainerPaths` (orchestrator/layout.py).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from orchestrator.layout import PATHS
from orchestrator.redact import redact_text
from orchestrator.releases.documents import ReleaseLine, ReleaseMeta, StoredFlags
from orchestrator.scripts import render_script

RELEASE_ID = re.compile(r"^(\d{8}T\d{6})-([0-9a-f]{8})$")


def new_release_id(bundle_sha: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{bundle_sha[:8]}"


def parse_release_ids(listing: str) -> list[str]:
    """Release ids from `ls -1 releases`, oldest first (ids sort by time)."""
    return sorted(line.strip() for line in listing.splitlines() if RELEASE_ID.match(line.strip()))


def current_release(readlink_output: str) -> str | None:
    target = readlink_output.strip().rstrip("/")
    name = target.rsplit("/", 1)[-1] if target else ""
    return name if RELEASE_ID.match(name) else None


def unique_release_id(bundle_sha: str, existing: Sequence[str], now: datetime | None = None) -> str:
    """A fresh id for a new install: every install is its own release, even with content seen before.

    Reusing the id of an earlier release with the same content would overwrite that attempt's verdict and mix
    its bench files with the new attempt's; a new id keeps both in the history.
    """
    when = now or datetime.now(UTC)
    taken = set(existing)
    rid = new_release_id(bundle_sha, when)
    while rid in taken:
        when += timedelta(seconds=1)
        rid = new_release_id(bundle_sha, when)
    return rid


def _b64(content: str) -> str:
    return base64.b64encode(content.encode()).decode()


class ReleaseFile(Protocol):
    """A file a release holds (render.files.RenderedFile): its name in the release dir, its mode, its text."""

    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> int: ...
    @property
    def content(self) -> str: ...


@dataclass(frozen=True)
class ReleaseBundle:
    release_id: str
    files: tuple[ReleaseFile, ...]
    flags: StoredFlags
    meta: ReleaseMeta


def write_release_script(bundle: ReleaseBundle) -> str:
    """Shell (run inside the container) that materialises a release directory atomically, if absent."""
    rdir = PATHS.release_dir(bundle.release_id)
    tmp = f"{rdir}.partial"
    files = [(f.name, f.content, f.mode) for f in bundle.files]
    # flags.json and meta.json are world-readable evidence: redacted like any other output.
    files += [("flags.json", bundle.flags.to_json(), 0o644), ("meta.json", bundle.meta.to_json(), 0o644)]
    return render_script("write_release.sh.j2", releases_dir=PATHS.releases_dir, release_dir=rdir, tmp_dir=tmp,
                         files=[{"path": f"{tmp}/{name}", "b64": _b64(content), "mode": mode}
                                for name, content, mode in files])


#: What a release installs: (file name in the release dir, installed path, mode).
INSTALLED_FILES: tuple[tuple[str, str, int], ...] = (("sglang.service", PATHS.unit_path, 0o644),
                                                     ("sglang.env", PATHS.env_path, 0o600),
                                                     ("secrets.yaml", PATHS.secrets_path, 0o600),
                                                     ("logging.json", PATHS.logging_path, 0o644))
#: Files a release may lack (a profile without an API key has neither): absent → removed on the target.
OPTIONAL_FILES = frozenset({"secrets.yaml", "logging.json"})


def activate_script(release_id: str, *, restart: bool, keep: int, fresh: bool = False, pre_start: str = "") -> str:
    """Shell (inside the container): install a release's files, point `current` at it, (re)start, prune.

    Every file is staged before any is replaced; a failure before the swap changes nothing installed, and with
    `fresh` (a release written by the same script, never current) also removes that release's directory.
    `pre_start`: a command run after the swap, before the server starts (the kernel cache check); it must not fail.
    """
    return render_script("activate_release.sh.j2", release_id=release_id, release_dir=PATHS.release_dir(release_id),
                         fresh=fresh, pre_start=pre_start,
                         files=INSTALLED_FILES, optional=OPTIONAL_FILES, current_link=PATHS.current_link,
                         unit=PATHS.unit_name, restart=restart, keep=keep, releases_dir=PATHS.releases_dir)


#: What the guard of a "kept" verdict prints (and its exit code) when the server is no longer the candidate.
NOT_CANDIDATE, NOT_CANDIDATE_RC = "DEPLOY_NOT_THE_CANDIDATE", 86


def not_candidate(output: str) -> tuple[str, str] | None:
    """The guard's refusal (`NOT_CANDIDATE current active`): the current release and sglang's state ("unknown"
    where the line does not say); None when the guard did not refuse."""
    if NOT_CANDIDATE not in output:
        return None
    words = next((ln.split()[1:] for ln in output.splitlines() if ln.startswith(NOT_CANDIDATE)), [])
    current, active = [*words, "unknown", "unknown"][:2]
    return current, active


def journal_cursor(output: str) -> str | None:
    """The JOURNAL_CURSOR=… line an activation printed: the unit's last journal entry before this start.

    None when the unit had no entry yet (everything in its journal then belongs to this start) or the line is
    missing.
    """
    for line in output.splitlines():
        if line.startswith("JOURNAL_CURSOR="):
            return line.split("=", 1)[1].strip() or None
    return None


def record_file_script(release_id: str, name: str, content: str, mode: int = 0o644) -> str:
    """Add evidence (server_info.json, bench.jsonl, verdict.json) to a release after the fact.

    A file others may read never carries a secret (journal excerpts in a verdict quote sglang's own startup log,
    which holds its API key): its content is redacted first.
    """
    if mode & 0o077:
        content = redact_text(content)
    return render_script("record_file.sh.j2", path=f"{PATHS.release_dir(release_id)}/{name}", b64=_b64(content),
                         mode=mode)


def record_boot_script(line: str, keep: int) -> str:
    """Append one start (a BootStart's JSON line) to the current release's boot.jsonl, keeping the newest `keep`."""
    return render_script("record_boot.sh.j2", current_link=PATHS.current_link, b64=_b64(redact_text(line) + "\n"),
                         keep=keep)


def read_releases_script(limit: int = 50) -> str:
    """Print every release's meta.json and verdict.json as JSON lines (for history), newest last."""
    return render_script("read_releases.sh.j2", current_link=PATHS.current_link, releases_dir=PATHS.releases_dir,
                         limit=limit)


def release_lines(text: str) -> list[ReleaseLine]:
    """The lines read_releases_script printed, typed (a line of another shape is left out)."""
    return [line for row in parse_release_lines(text) if (line := ReleaseLine.from_data(row)) is not None]


def parse_release_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
