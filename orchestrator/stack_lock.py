"""Stack locks: every distribution of a stack with its exact version and sha256, as pip-tools and uv write them.

`deploy lock PROFILE --host H` resolves the profile's requirement once in that host's container (`pip install
--dry-run --report`), and writes `locks/PROFILE.txt` into the inventory, reviewed in git like any lock file. A
profile with a lock installs with `pip install --require-hashes --no-deps -r LOCK`, so every host of a fleet gets
byte-identical wheels, and a wheel the index serves with another hash is refused naming the package. Pure: text in,
typed values out.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from orchestrator.errors import ConfigError

LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*) --hash=sha256:([0-9a-f]{64})$")
#: pip's block after `THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE`: one per package.
#: `    idna==3.10 from http://…/idna-3.10-py3-none-any.whl#sha256=… (from -r LOCK (line 4)):` then Expected/Got.
MISMATCH = re.compile(r"^\s+(\S+)==(\S+) from (\S+?)(?: \(from [^\n]*\))?:[ \t]*\n"
                      r"\s+Expected sha256 ([0-9a-f]+)[ \t]*\n\s+Got\s+([0-9a-f]+)", re.MULTILINE)


def normalize(name: str) -> str:
    """PEP 503 name normalisation: how pip compares names."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    sha256: str

    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Lock:
    entries: tuple[LockEntry, ...]

    @property
    def sha(self) -> str:
        """What the stack's identity takes from the lock: the entries only (comments and order do not count)."""
        return hashlib.sha256("\n".join(sorted(e.line() for e in self.entries)).encode()).hexdigest()

    def version_of(self, name: str) -> str | None:
        return next((e.version for e in self.entries if normalize(e.name) == normalize(name)), None)

    def requirements(self) -> str:
        """The requirements file pip installs with --require-hashes: one pinned, hashed line per distribution."""
        return "".join(f"{e.line()}\n" for e in sorted(self.entries, key=lambda e: normalize(e.name)))


def parse_lock(text: str, where: str) -> Lock:
    """A lock file: `name==version --hash=sha256:HEX` per line; `#` comments and blank lines are skipped."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        m = LINE.match(line)
        if m is None:
            raise ConfigError(f"{where}:{number}: {raw.strip()!r} is not `name==version --hash=sha256:HEX`",
                              fix="write the lock again with `deploy lock PROFILE --host H` (never by hand)")
        entries.append(LockEntry(m[1], m[2], m[3]))
    if not entries:
        raise ConfigError(f"{where} locks no distribution", fix="deploy lock PROFILE --host H writes it")
    return Lock(tuple(entries))


def lock_from_report(report_json: str) -> Lock:
    """pip's `install --dry-run --report` (format 1): each distribution it would install, with the sha256 the
    index gave for the file it picked."""
    try:
        report = json.loads(report_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"pip printed no installation report: {report_json.strip()[-300:]}") from exc
    entries = []
    for item in report.get("install") or []:
        meta = item.get("metadata") or {}
        info = (item.get("download_info") or {}).get("archive_info") or {}
        digest = (info.get("hashes") or {}).get("sha256") or str(info.get("hash") or "").removeprefix("sha256=")
        if not re.fullmatch(r"[0-9a-f]{64}", digest or ""):
            url = (item.get("download_info") or {}).get("url", "?")
            raise ValueError(f"the index gave no sha256 for {meta.get('name')} {meta.get('version')} ({url})")
        entries.append(LockEntry(str(meta["name"]), str(meta["version"]), digest))
    if not entries:
        raise ValueError("pip's report lists nothing to install")
    return Lock(tuple(entries))


def render_lock(lock: Lock, *, profile: str, requirement: str, index: str, host: str, at: str) -> str:
    header = (f"# deploy lock for profile {profile}: {requirement}\n"
              f"# resolved in the container of {host} at {at}"
              + (f" from{index}" if index.strip() else " from pip's default index") + "\n"
              "# every distribution with its sha256; installed with pip --require-hashes (docs/stacks.md#locks)\n")
    return header + lock.requirements()


@dataclass(frozen=True)
class HashMismatch:
    name: str
    version: str
    url: str
    expected: str
    got: str

    def describe(self) -> str:
        return f"{self.name}=={self.version} (locked sha256 {self.expected[:12]}…, the index serves {self.got[:12]}…)"


def hash_mismatches(pip_output: str) -> list[HashMismatch]:
    """The packages pip refused because the index's file has another hash than the lock's."""
    if "DO NOT MATCH THE HASHES" not in pip_output:
        return []
    return [HashMismatch(m[1], m[2], m[3], m[4], m[5]) for m in MISMATCH.finditer(pip_output)]


#: Installed with every venv, never part of a lock.
VENV_TOOLS = frozenset({"pip", "setuptools", "wheel"})


def installed_dists(dist_infos: str) -> dict[str, str]:
    """`name-version.dist-info` directory names (one a line) → {normalized name: version}."""
    out = {}
    for line in dist_infos.split():
        stem = line.strip().removesuffix(".dist-info")
        name, sep, version = stem.partition("-")
        if sep and version:
            out[normalize(name)] = version
    return out


def lock_drift(lock: Lock, installed: dict[str, str]) -> list[str]:
    """Where a stack's venv differs from its lock, by distribution (pip run into it behind the tool's back)."""
    out = []
    for e in sorted(lock.entries, key=lambda e: normalize(e.name)):
        have = installed.get(normalize(e.name))
        if have is None:
            out.append(f"{e.name}=={e.version} missing")
        elif have != e.version:
            out.append(f"{e.name}: locked {e.version}, installed {have}")
    locked = {normalize(e.name) for e in lock.entries}
    out += [f"+{name}=={version} (not in the lock)" for name, version in sorted(installed.items())
            if name not in locked and name not in VENV_TOOLS]
    return out
