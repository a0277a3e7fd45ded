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
from dataclasses import dataclass, field
from typing import Any

from orchestrator.layout import PATHS
from orchestrator.releases.documents import ReleaseLine, ReleaseMeta
from orchestrator.stacks.kernel_caches import CACHE_ROOT
from orchestrator.stacks.lock import Lock, constraints_text
from orchestrator.stacks.patches import Patch, patches_sha


@dataclass(frozen=True)
class Stack:
    """What pip is asked for: the requirement (`sglang[srt]==0.5.23`) and the index options it resolves against."""

    requirement: str
    sglang_version: str
    index_options: str = ""
    #: Every distribution with its sha256 (`deploy lock`): installed with --require-hashes, part of the identity.
    lock: Lock | None = None
    #: Unified diffs applied to the venv's site-packages once pip is done (`patches:`): their content is part of the
    #: identity, so a changed or added patch is another stack (orchestrator/patches.py).
    patches: tuple[Patch, ...] = ()
    #: Pins below sglang (the profile's `constraints:`, pip's `-c`): what sglang leaves open, part of the identity
    #: (a changed constraint is another stack) and of the lock's resolution (docs/stacks.md#constraints).
    constraints: tuple[str, ...] = ()

    @property
    def sha(self) -> str:
        """12 hex digits of sha256 over the identity: the stack's name on every host."""
        body: dict[str, str] = {"requirement": self.requirement, "index": self.index_options.strip()}
        if self.lock is not None:
            body["lock"] = self.lock.sha
        if self.patches:
            body["patches"] = patches_sha(self.patches)
        if self.constraints:
            body["constraints"] = constraints_text(sorted(self.constraints))
        identity = json.dumps(body, sort_keys=True)
        return hashlib.sha256(identity.encode()).hexdigest()[:12]

    @property
    def venv(self) -> str:
        """Where a stack that is not adopted is built."""
        return PATHS.stack_venv(self.sha)


#: The constraints file of an unlocked stack, in its venv (pip reads it with `-c`).
CONSTRAINTS_FILE = "deploy-constraints.txt"


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
    #: The patch files applied when it was built (as the profile names them), and the sha256 of every file they
    #: patched (path relative to site-packages), read back after applying: `status`/`plan` compare them.
    patches: tuple[str, ...] = ()
    patched: dict[str, str] = field(default_factory=dict)
    #: The constraints it was built with (the profile's `constraints:`).
    constraints: tuple[str, ...] = ()
    #: The CUDA its venv carries (the directory holding bin/nvcc: sglang 0.5.23's nvidia-cuda-nvcc), read from the
    #: venv (CT.toolchain, or the build's own check), never from the record file: the server's unit sets CUDA_HOME
    #: to it (render/service.py), and a release records it in meta.json's `stack`.
    cuda_home: str | None = None

    @property
    def usable(self) -> bool:
        return self.installed == self.sglang_version

    def record_json(self) -> str:
        body: dict[str, Any] = {"sha": self.sha, "venv": self.venv, "sglang_version": self.sglang_version,
                                "requirement": self.requirement, "adopted": self.adopted, "built_at": self.built_at}
        if self.patches:
            body.update(patches=list(self.patches), patched=self.patched)
        if self.constraints:
            body["constraints"] = list(self.constraints)
        return json.dumps(body, sort_keys=True)

    def to_meta(self) -> dict[str, Any]:
        """What a release records of the stack it runs (meta.json's `stack`)."""
        meta: dict[str, Any] = {"sha": self.sha, "venv": self.venv, "sglang_version": self.sglang_version,
                                "requirement": self.requirement}
        if self.patches:
            meta["patches"] = list(self.patches)
        if self.constraints:
            meta["constraints"] = list(self.constraints)
        if self.cuda_home:
            meta["cuda_home"] = self.cuda_home
        return meta


def record_for(stack: Stack, venv: str, *, adopted: bool, built_at: str,
               patched: Mapping[str, str] | None = None, cuda_home: str | None = None) -> StackRecord:
    return StackRecord(stack.sha, venv, stack.sglang_version, stack.requirement, adopted, built_at,
                       installed=stack.sglang_version, patches=tuple(p.name for p in stack.patches),
                       patched=dict(patched or {}), constraints=stack.constraints, cuda_home=cuda_home)


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
        patched = data.get("patched")
        patched = patched if isinstance(patched, dict) else {}
        out[str(data["sha"])] = StackRecord(
            str(data["sha"]), str(data["venv"]), str(data.get("sglang_version") or ""),
            str(data.get("requirement") or ""), bool(data.get("adopted")), str(data.get("built_at") or ""),
            installed.strip() or None, tuple(str(p) for p in data.get("patches") or ()),
            {str(k): str(v) for k, v in patched.items()}, tuple(str(c) for c in data.get("constraints") or ()))
    return out


def write_record_command(record: StackRecord) -> str:
    """Write a stack's record (after its venv is complete): temp file, then rename."""
    path = shlex.quote(PATHS.stack_record(record.sha))
    return (f"mkdir -p {shlex.quote(PATHS.stacks_dir)} && printf '%s\\n' {shlex.quote(record.record_json())} "
            f"> {path}.tmp && mv -f {path}.tmp {path}")


#: How often the build prints the venv's bytes while pip runs (orchestrator/stacks/pip_progress.py shows them): pip is
#: silent for minutes while it unpacks a real stack's ~10 GB.
PROGRESS_EVERY_S = 20


def build_command(stack: Stack, venv: str) -> str:
    """A fresh venv at `venv` (what a cut-short build left there removed first), then the requirement, or with a
    lock exactly its distributions (`--require-hashes --no-deps -r LOCK`); a failed install removes the venv. While
    pip runs, a background loop prints the venv's bytes every PROGRESS_EVERY_S (`deploy-progress: venv N bytes`)."""
    q = shlex.quote(venv)
    # sleep's output goes nowhere: a sleep outliving the killed loop must not hold the SSH channel open
    watch = (f"( while sleep {PROGRESS_EVERY_S} >/dev/null 2>&1; do "
             f"echo \"deploy-progress: venv $(du -sb {q} 2>/dev/null | cut -f1) bytes\"; done ) & w=$!")
    return (f"rm -rf {q} && mkdir -p {shlex.quote(PATHS.stacks_dir)} && python3 -m venv {q} && "
            f"{{ {watch}; {pip_install_command(stack, venv)}; rc=$?; kill $w 2>/dev/null; wait $w 2>/dev/null; "
            f"(exit $rc); }} || {{ rc=$?; rm -rf {q}; exit $rc; }}")


def stack_nvcc_command(venv: str) -> str:
    """The nvcc `venv` carries (sglang 0.5.23's nvidia-cuda-nvcc: site-packages/nvidia/cu13/bin/nvcc), the first in
    name order as CT.toolchain's program takes it; nothing without one."""
    return (f"ls -d {shlex.quote(venv.rstrip('/'))}/lib/python3*/site-packages/nvidia/cu*/bin/nvcc 2>/dev/null "
            "| head -n 1")


def nvcc_home(listed: str) -> str | None:
    """stack_nvcc_command's answer → the CUDA home (the directory holding bin/nvcc); None without one."""
    path = listed.strip().splitlines()[0] if listed.strip() else ""
    return path.removesuffix("/bin/nvcc") if path.endswith("/bin/nvcc") else None


def pip_cache_env() -> str:
    """The environment every pip run of a stack gets (the build's and `deploy lock`'s resolution): the one managed
    pip cache beside the stacks (PATHS.pip_cache_dir), which the disk budget counts and empties first."""
    return f"PIP_CACHE_DIR={shlex.quote(PATHS.pip_cache_dir)}"


def pip_install_command(stack: Stack, venv: str) -> str:
    """`VENV/bin/pip install` of the stack: its requirement (with its constraints, written into the venv, as pip's
    `-c`), or its lock (written next to its record first; the lock was resolved with the constraints)."""
    pip = (f"{pip_cache_env()} {shlex.quote(venv)}/bin/pip install --disable-pip-version-check --progress-bar off"
           f"{stack.index_options}")
    if stack.lock is None and stack.constraints:
        file = shlex.quote(f"{venv}/{CONSTRAINTS_FILE}")
        return (f"printf '%s' {shlex.quote(constraints_text(stack.constraints))} > {file} && "
                f"{pip} -c {file} {shlex.quote(stack.requirement)}")
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


def prune_command(doomed: Iterable[StackRecord], *, pip_cache: bool = False) -> str:
    """With `pip_cache`, empty the managed pip cache first (only a cache: the next pip run downloads again); then
    remove each record first (it stops being a stack), then its venv, then its kernel caches (every shape's
    directory and those set aside: results no other stack may read, and no release can start on a pruned stack);
    only paths under the stacks dir and the cache root."""
    parts = [f"rm -rf {shlex.quote(PATHS.pip_cache_dir)}"] if pip_cache else []
    for r in doomed:
        if r.adopted or r.venv != PATHS.stack_venv(r.sha):
            continue
        parts.append(f"rm -f {shlex.quote(PATHS.stack_record(r.sha))} && rm -rf {shlex.quote(r.venv)} "
                     f"{shlex.quote(f'{CACHE_ROOT}/{r.sha}-')}*")
    return " && ".join(parts) or "true"


# ------------------------------------------------------------------------------------ the disk budget in bytes

#: Between the stacks' sizes and the newest verified release's meta.json in CT.stack_usage.
VERIFIED_MARK = "__DEPLOY_VERIFIED_META__"


#: The managed pip cache's line among the stacks' sizes (no stack sha is this word).
PIP_CACHE_KEY = "pip-cache"


def stack_sizes_script() -> str:
    """`SHA<TAB>BYTES` (`du -sb` of its venv) for every stack record whose venv exists, one a line; then
    `pip-cache<TAB>BYTES` for the managed pip cache when it exists."""
    pip = shlex.quote(PATHS.pip_cache_dir)
    return (f"if cd {shlex.quote(PATHS.stacks_dir)} 2>/dev/null; then for f in *.json; do [ -f \"$f\" ] || continue; "
            "v=$(sed -n 's/.*\"venv\": *\"\\([^\"]*\\)\".*/\\1/p' \"$f\"); [ -d \"$v\" ] || continue; "
            "printf '%s\\t%s\\n' \"${f%.json}\" \"$(du -sb \"$v\" | cut -f1)\"; done; "
            f"if [ -d {pip} ]; then printf '{PIP_CACHE_KEY}\\t%s\\n' \"$(du -sb {pip} | cut -f1)\"; fi; fi")


def stack_usage_command() -> str:
    """The stacks' sizes, then the meta.json of the newest verified (`kept`) release (whose stack is never pruned)."""
    rel = shlex.quote(PATHS.releases_dir)
    return (f"{stack_sizes_script()}; printf '%s\\n' {VERIFIED_MARK}; "
            f"for r in $(ls -1r {rel} 2>/dev/null); do grep -qs '\"verdict\": *\"kept\"' {rel}/\"$r\"/verdict.json "
            f"&& {{ tr -d '\\n' < {rel}/\"$r\"/meta.json; echo; break; }}; done; true")


@dataclass(frozen=True)
class StackSizes:
    """What the disk budget counts in the container: bytes per stack (`du -sb` of its venv) and of the managed pip
    cache (0: none)."""

    stacks: dict[str, int] = field(default_factory=dict)
    pip_cache: int = 0


def parse_stack_sizes(text: str) -> StackSizes:
    """`SHA<TAB>BYTES` lines (and `pip-cache<TAB>BYTES`) → the sizes; other lines are skipped."""
    out: dict[str, int] = {}
    pip = 0
    for line in text.splitlines():
        sha, _, size = line.partition("\t")
        if not sha.strip() or not size.strip().isdigit():
            continue
        if sha.strip() == PIP_CACHE_KEY:
            pip = int(size.strip())
        else:
            out[sha.strip()] = int(size.strip())
    return StackSizes(out, pip)


@dataclass(frozen=True)
class StackUsage:
    """CT.stack_usage: the stacks' and the pip cache's bytes, and the stack of the newest verified release."""

    sizes: StackSizes
    verified_stack: str | None = None


def parse_stack_usage(text: str) -> StackUsage:
    sizes, _, verified = text.partition(f"{VERIFIED_MARK}\n")
    first = verified.strip().splitlines()[0] if verified.strip() else ""
    return StackUsage(parse_stack_sizes(sizes), release_stack_sha(ReleaseMeta.from_text(first)))


def budget_bytes(gb: float) -> int:
    """stacks_disk_budget_gb in bytes (GB = 10^9 bytes, as `du -sb` counts)."""
    return int(gb * 1_000_000_000)


def venv_sizes(records: Mapping[str, StackRecord], sizes: Mapping[str, int]) -> dict[str, int]:
    """Bytes by sha, one sha per venv: a venv recorded under two shas (the profile's venv adopted under this
    host's stack and a site template's) is on disk once."""
    seen: set[str] = set()
    out: dict[str, int] = {}
    for sha in sorted(records):
        venv = records[sha].venv.rstrip("/")
        if sha in sizes and venv not in seen:
            seen.add(venv)
            out[sha] = sizes[sha]
    return out


def kept_bytes(records: Mapping[str, StackRecord], sizes: Mapping[str, int], doomed: Iterable[StackRecord]) -> int:
    gone = {r.sha for r in doomed}
    return sum(venv_sizes({k: v for k, v in records.items() if k not in gone}, sizes).values())


@dataclass(frozen=True)
class BudgetPlan:
    """What a build's prune removes: the managed pip cache (emptied first when the kept stacks and the cache are
    over the budget: it is only a cache) and the stacks (by count, then the oldest prunable until the rest fit)."""

    stacks: list[StackRecord]
    pip_cache: bool = False


def budget_prune_plan(records: Mapping[str, StackRecord], keep: int, protected: set[str],
                      sizes: StackSizes, budget: int | None) -> BudgetPlan:
    """prune_plan's stacks, then (with a budget in bytes) the pip cache when the kept stacks and it are over the
    budget, then the oldest prunable stacks until the kept ones fit. Never a protected stack nor an adopted venv;
    the kept stacks may stay over the budget when nothing else is prunable (the build's refusal, budget_refusal,
    says so before a build)."""
    doomed = prune_plan(records, keep, protected)
    if budget is None:
        return BudgetPlan(doomed)
    gone = {r.sha for r in doomed}
    prunable = sorted((r for r in records.values()
                       if not r.adopted and r.sha not in protected and r.sha not in gone), key=lambda r: r.built_at)
    total = kept_bytes(records, sizes.stacks, doomed)
    empty_pip = sizes.pip_cache > 0 and total + sizes.pip_cache > budget
    for rec in prunable:
        if total <= budget:
            break
        doomed.append(rec)
        total -= sizes.stacks.get(rec.sha, 0)
    return BudgetPlan(doomed, empty_pip)


@dataclass(frozen=True)
class DiskTally:
    """Bytes per stack (by sha, sorted) and of the managed pip cache: one side of what the budget saw."""

    stacks: tuple[tuple[str, int], ...] = ()
    pip_cache: int = 0

    @classmethod
    def of(cls, stacks: Mapping[str, int], pip_cache: int) -> DiskTally:
        return cls(tuple(sorted(stacks.items())), pip_cache)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.stacks) + self.pip_cache

    def to_dict(self) -> dict[str, Any]:
        return {"stacks": [{"sha": sha, "bytes": n} for sha, n in self.stacks], "pip_cache_bytes": self.pip_cache,
                "total_bytes": self.total}


@dataclass(frozen=True)
class BudgetReport:
    """What the disk budget counted before a build's prune, what the prune removed and what is kept (sglang_install's
    details `disk_budget`, in `up`/`roll --json`)."""

    budget_bytes: int
    counted: DiskTally
    pruned: DiskTally
    kept: DiskTally

    @property
    def over(self) -> bool:
        return self.kept.total > self.budget_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"budget_bytes": self.budget_bytes, "counted": self.counted.to_dict(),
                "pruned": self.pruned.to_dict(), "kept": self.kept.to_dict(), "over": self.over}

    def kept_line(self) -> str:
        """`kept stacks: SHA N bytes, …; pip cache N bytes; T bytes of a budget of B`."""
        stacks = ", ".join(f"{sha} {n:,} bytes" for sha, n in self.kept.stacks) or "none"
        return (f"kept stacks: {stacks}; pip cache {self.kept.pip_cache:,} bytes; {self.kept.total:,} bytes of a "
                f"budget of {self.budget_bytes:,}")


def estimate_stack_bytes(stack: Stack, records: Mapping[str, StackRecord],
                         sizes: Mapping[str, int]) -> tuple[int, str] | None:
    """A stack not built yet: the size of an existing stack of the same requirement, else of the largest stack;
    with how it was estimated. None: no stack's size is known."""
    same = [(sizes[r.sha], r.sha) for r in records.values() if r.requirement == stack.requirement and r.sha in sizes]
    if same:
        size, sha = max(same)
        return size, f"estimated from stack {sha} of the same requirement"
    known = [(size, sha) for sha, size in sizes.items() if sha in records]
    if not known:
        return None
    size, sha = max(known)
    return size, f"estimated from the largest kept stack, {sha}"


def budget_refusal(stack: Stack, records: Mapping[str, StackRecord], sizes: Mapping[str, int],
                   protected: set[str], budget_gb: float) -> str | None:
    """Why the new `stack` cannot fit the budget even after pruning every prunable stack (None: it can). The
    stacks never pruned: the protected ones (current and newest verified release) and the adopted venvs."""
    estimate = estimate_stack_bytes(stack, records, sizes)
    if estimate is None:
        return None
    size, how = estimate
    fixed = venv_sizes({sha: r for sha, r in records.items()
                        if sha != stack.sha and (r.adopted or sha in protected)}, sizes)
    floor, budget = size + sum(fixed.values()), budget_bytes(budget_gb)
    if floor <= budget:
        return None
    kept = ", ".join(f"{sha} {n:,} bytes" for sha, n in sorted(fixed.items())) or "none"
    return (f"stack {stack.sha} ({stack.requirement}) needs about {size:,} bytes ({how}); with the stacks that are "
            f"never pruned ({kept}) the stacks would take {floor:,} bytes, over stacks_disk_budget_gb {budget_gb:g} "
            f"({budget:,} bytes) even after pruning every other stack; nothing was changed")


# ------------------------------------------------------------------------------ a stack whose sglang does not import


@dataclass(frozen=True)
class ImportFailure:
    """What the flags probe saw when `import sglang` failed in a stack's venv (orchestrator/probes/flags_probe.py):
    the exception, the installed modules its traceback went through, and the distribution that raised it."""

    exception: str
    message: str
    module: str | None = None
    distribution: str | None = None
    version: str | None = None
    chain: tuple[str, ...] = ()

    @classmethod
    def of(cls, data: object) -> ImportFailure | None:
        if not isinstance(data, dict) or not data.get("exception"):
            return None
        return cls(str(data["exception"]), str(data.get("message") or ""),
                   str(data["module"]) if data.get("module") else None,
                   str(data["distribution"]) if data.get("distribution") else None,
                   str(data["version"]) if data.get("version") else None,
                   tuple(str(m) for m in data.get("chain") or ()))

    @property
    def culprit(self) -> str | None:
        """`kernels 0.19.1`: the distribution that raised it, when it is not sglang itself."""
        if not self.distribution or self.distribution.lower() == "sglang":
            return None
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    def describe(self) -> str:
        where = f" in {self.module}" if self.module else ""
        via = " → ".join(dict.fromkeys(m.split(".")[0] for m in self.chain))
        return (f"{self.exception}: {self.message}{where}" + (f" ({self.culprit})" if self.culprit else "")
                + (f", imported via {via}" if " → " in via else ""))

    def fix(self, profile: str) -> str:
        if self.culprit and self.distribution and self.version:
            return (f"pin {self.distribution} below the build that breaks it, in profiles.{profile}.constraints "
                    f"(e.g. `constraints: [\"{self.distribution}<{self.version}\"]`; sglang 0.5.12.post1 needs "
                    "kernels<0.15, the range 0.5.23 pins), then `deploy up` builds it as a new stack "
                    "(docs/stacks.md#constraints)")
        return ("read the traceback with the stack's python (`VENV/bin/python -c 'import sglang'`) and pin what broke "
                "in the profile's constraints (docs/stacks.md#constraints)")

