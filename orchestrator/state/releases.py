"""Releases live on the target, inside the container, so every operator machine sees the same history.

/var/lib/deploy/releases/<id>/   sglang.service, sglang.env (0600), secrets.yaml (0600) and logging.json
                                 (with an API key),
                                 flags.json, meta.json, and later
                                 server_info.json, bench.jsonl, verdict.json
/var/lib/deploy/current          symlink → releases/<id>

Installing is one script: write the release dir under a temporary name and rename it, copy the files into place
with temp-file + rename, swap the `current` symlink atomically, daemon-reload, restart. A kill at any point
leaves either the old or the new complete state; re-running converges. This module only builds scripts and
parses listings (pure); steps run them.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.facts import CURRENT_LINK, ENV_PATH, RELEASES_DIR, UNIT_NAME, UNIT_PATH
from orchestrator.redact import redact, redact_text
from orchestrator.render.files import RenderedFile
from orchestrator.render.service import LOGGING_PATH, SECRETS_PATH

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


def find_by_sha(ids: Sequence[str], bundle_sha: str) -> str | None:
    """An existing release with the same content: reuse it instead of writing a duplicate."""
    for rid in reversed(ids):
        m = RELEASE_ID.match(rid)
        if m and m.group(2) == bundle_sha[:8]:
            return rid
    return None


def _write_file(path: str, content: str, mode: int) -> str:
    b64 = base64.b64encode(content.encode()).decode()
    tag = "DEPLOY_B64_EOF"
    return (f"base64 -d > {shlex.quote(path)} <<'{tag}'\n{b64}\n{tag}\n"
            f"chmod {mode:04o} {shlex.quote(path)}")


@dataclass(frozen=True)
class ReleaseBundle:
    release_id: str
    files: tuple[RenderedFile, ...]
    flags: Mapping[str, Any]
    meta: Mapping[str, Any]


def write_release_script(bundle: ReleaseBundle) -> str:
    """Shell (run inside the container) that materialises a release directory atomically, if absent."""
    rdir = f"{RELEASES_DIR}/{bundle.release_id}"
    tmp = f"{rdir}.partial"
    parts = ["set -e", "umask 077", f"mkdir -p {RELEASES_DIR}",
             f"if [ ! -d {shlex.quote(rdir)} ]; then",
             f"rm -rf {shlex.quote(tmp)}; mkdir -p {shlex.quote(tmp)}"]
    for f in bundle.files:
        parts.append(_write_file(f"{tmp}/{f.name}", f.content, f.mode))
    # flags.json and meta.json are world-readable evidence: redacted like any other output.
    parts.append(_write_file(f"{tmp}/flags.json", json.dumps(redact(dict(bundle.flags)), sort_keys=True) + "\n",
                             0o644))
    parts.append(_write_file(f"{tmp}/meta.json", json.dumps(redact(dict(bundle.meta)), sort_keys=True) + "\n",
                             0o644))
    parts += [f"mv -T {shlex.quote(tmp)} {shlex.quote(rdir)}", "fi"]
    return "\n".join(parts) + "\n"


#: What a release installs: (file name in the release dir, installed path, mode).
INSTALLED_FILES: tuple[tuple[str, str, int], ...] = (("sglang.service", UNIT_PATH, 0o644),
                                                     ("sglang.env", ENV_PATH, 0o600),
                                                     ("secrets.yaml", SECRETS_PATH, 0o600),
                                                     ("logging.json", LOGGING_PATH, 0o644))
#: Files a release may lack (a profile without an API key has neither): absent → removed on the target.
OPTIONAL_FILES = frozenset({"secrets.yaml", "logging.json"})


def activate_script(release_id: str, *, restart: bool, keep: int) -> str:
    """Shell (inside the container): install a release's files, point `current` at it, (re)start, prune.

    Used for new releases and for rollbacks alike: a release directory is all it needs.
    """
    rdir = f"{RELEASES_DIR}/{release_id}"
    lines = ["set -e", f"test -d {shlex.quote(rdir)}"]
    for name, path, mode in INSTALLED_FILES:
        dest, src = shlex.quote(path), shlex.quote(rdir + "/" + name)
        install = [f"mkdir -p $(dirname {dest})", f"install -m {mode:04o} {src} {dest}.deploy-tmp",
                   f"mv -f {dest}.deploy-tmp {dest}"]
        if name in OPTIONAL_FILES:
            install = [f"if [ -f {src} ]; then {'; '.join(install)}; else rm -f {dest}; fi"]
        lines += install
    lines += [f"ln -sfn releases/{shlex.quote(release_id)} {CURRENT_LINK}.deploy-tmp",
              f"mv -T {CURRENT_LINK}.deploy-tmp {CURRENT_LINK}",
              # Where this start's log begins: health waits read only lines after it.
              f"echo \"JOURNAL_LINES=$(journalctl -u {UNIT_NAME} --no-pager -o cat 2>/dev/null | wc -l)\"",
              "systemctl daemon-reload",
              f"systemctl enable {UNIT_NAME} >/dev/null 2>&1 || true",
              f"systemctl {'restart' if restart else 'start'} {UNIT_NAME}"]
    # Keep the newest `keep` releases; never the current one.
    lines += [f"cd {RELEASES_DIR} && ls -1 | grep -E '^[0-9]{{8}}T[0-9]{{6}}-[0-9a-f]{{8}}$' | sort | head -n -{keep} "
              f"| grep -vx {shlex.quote(release_id)} | xargs -r rm -rf --"]
    return "\n".join(lines) + "\n"


def journal_offset(output: str) -> int:
    """The JOURNAL_LINES=N line an activation printed (0 when absent)."""
    for line in output.splitlines():
        if line.startswith("JOURNAL_LINES="):
            value = line.split("=", 1)[1].strip()
            return int(value) if value.isdigit() else 0
    return 0


def record_file_script(release_id: str, name: str, content: str, mode: int = 0o644) -> str:
    """Add evidence (server_info.json, bench.jsonl, verdict.json) to a release after the fact.

    A file others may read never carries a secret (journal excerpts in a verdict quote sglang's own startup log,
    which holds its API key): its content is redacted first.
    """
    path = f"{RELEASES_DIR}/{release_id}/{name}"
    if mode & 0o077:
        content = redact_text(content)
    return f"set -e\n{_write_file(path + '.deploy-tmp', content, mode)}\nmv -f {path}.deploy-tmp {path}\n"


def read_releases_script(limit: int = 50) -> str:
    """Print every release's meta.json and verdict.json as JSON lines (for history), newest last."""
    return (f"printf '{{\"current\":\"%s\"}}\\n' \"$(readlink {CURRENT_LINK} 2>/dev/null | sed 's#.*/##')\"\n"
            f"cd {RELEASES_DIR} 2>/dev/null || exit 0\n"
            f"for d in $(ls -1 | grep -E '^[0-9]{{8}}T[0-9]{{6}}-[0-9a-f]{{8}}$' | sort | tail -n {int(limit)}); do\n"
            "  printf '{\"id\":\"%s\",\"meta\":' \"$d\"; tr -d '\\n' < \"$d/meta.json\" 2>/dev/null || printf 'null';\n"
            "  printf ',\"verdict\":'; tr -d '\\n' < \"$d/verdict.json\" 2>/dev/null || printf 'null';\n"
            "  printf ',\"flags\":'; tr -d '\\n' < \"$d/flags.json\" 2>/dev/null || printf 'null'; printf '}\\n'\n"
            "done\n")


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


def in_container_script(vmid: int, script: str) -> str:
    """Host-side script that feeds `script` to bash inside the container on stdin (no argv exposure)."""
    tag = "DEPLOY_CT_EOF"
    if tag in script:
        raise ValueError("script contains the heredoc terminator")
    return f"pct exec {int(vmid)} -- bash -s <<'{tag}'\n{script}{tag}\n"
