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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


class SourceOnly(ValueError):
    """The resolution picked a source distribution: the index serves no wheel of it for the container's Python, so
    every stack build would compile it in the container (sglang 0.5.23 on Python 3.13: outlines==0.1.11 pins
    outlines_core==0.1.26, whose Rust extension has wheels up to cp312 only)."""

    def __init__(self, sdists: Sequence[tuple[str, str, str]], tag: str) -> None:
        self.sdists = tuple(sdists)  # (name, version, file name)
        self.tag = tag
        names = ", ".join(f"{n} {v} ({f})" for n, v, f in self.sdists)
        super().__init__(f"the index serves no {tag} wheel of {names}: pip would build "
                         f"{'it' if len(self.sdists) == 1 else 'them'} from source in the container at every stack "
                         "build, with whatever toolchain its build needs (a Rust extension such as outlines_core: "
                         "Rust, cargo and its crates' registry), which a locked stack must not depend on")

    @property
    def fix(self) -> str:
        first = self.sdists[0]
        return (f"build the wheel once for {self.tag} (`pip wheel --no-deps {first[0]}=={first[1]}` with its "
                "toolchain) into the container's index (container.pip_index_url), or run this release on a Python "
                "the index has wheels for (another container template: Debian 12's python3 is 3.11)")


def lock_from_report(report_json: str) -> Lock:
    """pip's `install --dry-run --report` (format 1): each distribution it would install, with the sha256 the
    index gave for the file it picked. A stack locks wheels only: a source distribution in the resolution is
    refused (SourceOnly), naming it, before any multi-GB build would fail at compiling it."""
    try:
        report = json.loads(report_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"pip printed no installation report: {report_json.strip()[-300:]}") from exc
    entries, sdists = [], []
    for item in report.get("install") or []:
        meta = item.get("metadata") or {}
        info = (item.get("download_info") or {}).get("archive_info") or {}
        digest = (info.get("hashes") or {}).get("sha256") or str(info.get("hash") or "").removeprefix("sha256=")
        url = str((item.get("download_info") or {}).get("url", "?"))
        if not re.fullmatch(r"[0-9a-f]{64}", digest or ""):
            raise ValueError(f"the index gave no sha256 for {meta.get('name')} {meta.get('version')} ({url})")
        entries.append(LockEntry(str(meta["name"]), str(meta["version"]), digest))
        if not (file := url.split("#", 1)[0].rsplit("/", 1)[-1]).endswith(".whl"):
            sdists.append((str(meta["name"]), str(meta["version"]), file))
    if sdists:
        target = target_from_environment(report.get("environment") or {})
        raise SourceOnly(sdists, target.tag if target is not None else "this Python's")
    if not entries:
        raise ValueError("pip's report lists nothing to install")
    return Lock(tuple(entries))


def render_lock(lock: Lock, *, profile: str, requirement: str, index: str, host: str, at: str,
                target: LockTarget | None = None, constraints: Sequence[str] = ()) -> str:
    header = (f"# deploy lock for profile {profile}: {requirement}\n"
              f"# resolved in the container of {host} at {at}"
              + (f" from{index}" if index.strip() else " from pip's default index") + "\n"
              + (f"{TARGET_PREFIX}{target.describe()}\n" if target is not None else "")
              + f"{CONSTRAINTS_PREFIX}{', '.join(constraints) if constraints else '(none)'}\n"
              "# every distribution with its sha256; installed with pip --require-hashes (docs/stacks.md#locks)\n")
    return header + lock.requirements()


# ------------------------------------------------------------------ what a lock was resolved for, and with what

TARGET_PREFIX = "# resolved for "
CONSTRAINTS_PREFIX = "# constraints: "
TARGET_LINE = re.compile(r"^# resolved for (\S+) \((\S+) (\d+\.\d+), (\S+) (\S+)\)\s*$")


@dataclass(frozen=True)
class LockTarget:
    """The interpreter and platform a lock was resolved for: sglang, torch and triton publish CPython-version-specific
    wheels (cp311, cp313), so a lock resolved on one Python names files another cannot install."""

    implementation: str  # sys.implementation.name: cpython
    python: str  # major.minor: 3.11
    system: str  # sys.platform: linux
    machine: str  # platform.machine(): x86_64

    @property
    def tag(self) -> str:
        """The wheel tag of the interpreter: cp311."""
        short = {"cpython": "cp", "pypy": "pp"}.get(self.implementation, self.implementation)
        return short + self.python.replace(".", "")

    def describe(self) -> str:
        return f"{self.tag} ({self.implementation} {self.python}, {self.system} {self.machine})"


def target_from_environment(env: Mapping[str, Any]) -> LockTarget | None:
    """pip's report's `environment` (PEP 508 marker values) → the target; None when it lacks them."""
    try:
        return LockTarget(str(env["implementation_name"]), str(env["python_version"]), str(env["sys_platform"]),
                          str(env["platform_machine"]))
    except KeyError:
        return None


def report_target(report_json: str) -> LockTarget | None:
    """The interpreter and platform pip resolved the report for."""
    try:
        env = json.loads(report_json).get("environment") or {}
    except (json.JSONDecodeError, AttributeError):
        return None
    return target_from_environment(env) if isinstance(env, dict) else None


def lock_target(text: str) -> LockTarget | None:
    """The `# resolved for cp311 (cpython 3.11, linux x86_64)` line of a lock; None for a lock written before."""
    for line in text.splitlines():
        if m := TARGET_LINE.match(line):
            return LockTarget(m[2], m[3], m[4], m[5])
    return None


#: The container's interpreter, as the target fact reads it (one line: implementation, version, platform, machine).
TARGET_PROGRAM = ("import platform, sys; print(sys.implementation.name, '%d.%d' % sys.version_info[:2], sys.platform, "
                  "platform.machine())")


def parse_target(text: str) -> LockTarget | None:
    """TARGET_PROGRAM's line → the container's target; None when it printed something else."""
    parts = text.strip().splitlines()[-1].split() if text.strip() else []
    if len(parts) != 4 or not re.fullmatch(r"\d+\.\d+", parts[1]):
        return None
    return LockTarget(*parts)


def lock_constraints(text: str) -> tuple[str, ...] | None:
    """The `# constraints: …` line of a lock; None for a lock written before constraints were recorded."""
    for line in text.splitlines():
        if line.startswith(CONSTRAINTS_PREFIX):
            rest = line.removeprefix(CONSTRAINTS_PREFIX).strip()
            return () if rest == "(none)" else tuple(c.strip() for c in rest.split(", ") if c.strip())
    return None


# ------------------------------------------------------------------ constraints: pins below sglang

#: `kernels<0.15`, `kernels>=0.14.1,<0.15`: a distribution name and release-number comparisons (pip's `-c` lines).
CONSTRAINT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*((?:==|!=|<=|>=|<|>)\s*\d[A-Za-z0-9.]*"
                        r"(?:\s*,\s*(?:==|!=|<=|>=|<|>)\s*\d[A-Za-z0-9.]*)*)$")
SPEC = re.compile(r"(==|!=|<=|>=|<|>)\s*(\d[A-Za-z0-9.]*)")
VERSION = re.compile(r"^(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?(?:\+.*)?$")


@dataclass(frozen=True)
class Constraint:
    name: str
    specs: tuple[tuple[str, str], ...]  # (operator, version)

    @property
    def text(self) -> str:
        return self.name + ",".join(op + v for op, v in self.specs)

    def allows(self, version: str) -> bool | None:
        """Whether `version` meets every comparison; None when it is not a version this can compare."""
        have = version_key(version)
        if have is None:
            return None
        for op, v in self.specs:
            want = version_key(v)
            if want is None:
                return None
            ok = {"==": have == want, "!=": have != want, "<": have < want, "<=": have <= want,
                  ">": have > want, ">=": have >= want}[op]
            if not ok:
                return False
        return True


def version_key(version: str) -> tuple[int, ...] | None:
    """A PEP 440 public version as a sortable tuple (release padded, then dev < a < b < rc < final, then post)."""
    m = VERSION.match(version.strip())
    if m is None:
        return None
    release = tuple(int(p) for p in m[1].split("."))
    release += (0,) * (6 - len(release))
    pre = {"a": 1, "b": 2, "rc": 3}.get(m[2] or "", 4)
    if m[5] is not None and m[2] is None and m[4] is None:
        pre = 0  # X.devN sorts before X's pre-releases
    return (*release[:6], pre, int(m[3] or 0), int(m[4] or -1) + 1, int(m[5]) if m[5] is not None else 1 << 30)


def parse_constraint(text: str) -> Constraint:
    """A profile's constraint → its name and comparisons; ValueError naming what is wrong."""
    m = CONSTRAINT.match(text.strip())
    if m is None:
        raise ValueError(f"constraint {text!r} is not `name` and release comparisons (e.g. kernels<0.15, "
                         "kernels>=0.14.1,<0.15)")
    if normalize(m[1]) == "sglang":
        raise ValueError(f"constraint {text!r}: sglang is pinned by sglang_version, not by a constraint")
    return Constraint(m[1], tuple((op, v) for op, v in SPEC.findall(m[2])))


def constraint_violations(constraints: Sequence[str], installed: Mapping[str, str]) -> list[str]:
    """The installed distributions ({normalized name: version}) that break a constraint, one line each; a
    constrained distribution that is not installed breaks nothing (pip installs it only when something needs it)."""
    out = []
    for text in constraints:
        c = parse_constraint(text)
        have = installed.get(normalize(c.name))
        if have is not None and c.allows(have) is not True:
            out.append(f"{c.name} {have} (constraint {c.text})")
    return out


def constraints_text(constraints: Sequence[str]) -> str:
    """The constraints file pip reads with `-c`: one line each."""
    return "".join(f"{parse_constraint(c).text}\n" for c in constraints)


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
