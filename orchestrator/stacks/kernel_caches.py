"""Kernel and JIT caches as managed artifacts: one directory per stack and server shape (pure, no I/O).

A real sglang start spends minutes on FlashInfer autotune, the flashinfer/triton JIT and DeepGEMM (issue 35); their
results are valid only for the stack that made them (the flashinfer build, triton, deep_gemm) and the server's shape
(model, quantization, TP, MoE backend). So the unit's env points every cache at

    /var/cache/deploy/kernels/<stack sha>-<shape sha>/      SGLANG_CACHE_DIR (flashinfer/autotune/… under it)
                                                         triton/, .cache/flashinfer/ (JIT), deep_gemm/, tvm-ffi/,
                                                         sglang-jit/, tilelang/, cuda/, cute-dsl/, inductor/

Every cache a real start writes (sglang 0.5.12.post1 on an H100, tests/fixtures/sglang/real-h100/du_caches.txt:
flashinfer's JIT, triton, sglang's own JIT kernels through tvm-ffi in ~/.cache/tvm-ffi, the PTX JIT in ~/.nv) and
those of the paths the H100 did not take (DeepGEMM, TileLang's NSA indexer kernels, CuTe DSL, Inductor; sglang
0.5.23's SGLANG_JIT_CACHE_DIR) is pointed under the directory, so none lands in $HOME or /tmp.

FlashInfer's cubins (its TRT-LLM-gen kernels, fetched on first use when the stack carries no flashinfer-cubin
package: sglang 0.5.23 pins none) would land in every stack × shape directory (`.cache/flashinfer/cubins` under
FLASHINFER_WORKSPACE_BASE, flashinfer/jit/env.py of 0.6.11.post1 and 0.7.2). They depend on the flashinfer version
only, so the check before a start links that directory to one shared place, `flashinfer-cubins/<version>/` in the
cache root, keyed by the version the stack's venv holds.

`/var/cache/deploy/kernels` is a bind mount of a host directory (container.kernel_cache, default
/var/lib/deploy/kernel-cache/<vmid>), so a rebuilt container keeps its caches. A changed stack or shape is another
directory, so it starts cold and never reads another stack's results; a rollback's env names its own directory again,
so it starts warm. The directory carries a manifest (`deploy-cache.json`: key, stack, shape) that the check before
each start compares; a directory whose manifest does not match, or whose autotune JSON does not parse, is set aside
(renamed `<dir>.set-aside-<time>`) and the start rebuilds it. Set-aside directories are kept for a look (why did it
fail?), but only the newest KEEP_SET_ASIDE of the cache root: each set-aside removes older ones (issue 50: they were
never removed, and each holds a whole cache).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.releases.documents import CacheMeta

#: Where the caches live in the container: the mount point of the host's cache directory.
CACHE_ROOT = "/var/cache/deploy/kernels"
#: The host directory mounted there when the inventory names none (one per container, so two CTs never share).
HOST_CACHE_ROOT = "/var/lib/deploy/kernel-cache"
#: The profile env variable that, when set, means the operator points the caches somewhere himself: no managed cache.
OWN_CACHE_VAR = "SGLANG_CACHE_DIR"

_TP_NAMES = ("tensor-parallel-size", "tp-size", "tp")
#: The file deploy leaves in a kernel cache directory it made: only such a directory is ever chowned or chmodded.
CACHE_DIR_MARK = ".deploy-made-this-dir"


@dataclass(frozen=True)
class CacheDirState:
    """The node's kernel cache directory as the fact reads it: its owner, and whether deploy made it."""

    owner: str
    ours: bool


def host_cache_dir(vmid: int) -> str:
    """The default host directory for a container's caches."""
    return f"{HOST_CACHE_ROOT}/{vmid}"


@dataclass(frozen=True)
class CacheShape:
    """What the kernels were built and tuned for, besides the stack."""

    model: str
    quantization: str
    tp: int
    moe_backend: str

    @classmethod
    def from_flags(cls, model: str, flags: Mapping[str, Any]) -> CacheShape:
        tp = next((flags[n] for n in _TP_NAMES if flags.get(n) is not None), 1)
        return cls(model=model, quantization=str(flags.get("quantization") or "auto"), tp=int(str(tp)),
                   moe_backend=str(flags.get("moe-runner-backend") or "auto"))

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "quantization": self.quantization, "tp": self.tp,
                "moe_backend": self.moe_backend}

    @property
    def sha(self) -> str:
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:12]


def stack_id(stack_sha: str, venv: str) -> str:
    """The stack part of a key: its sha; a stack of an earlier deploy (no sha) is named by its venv's path."""
    return stack_sha or "venv" + hashlib.sha256(venv.encode()).hexdigest()[:8]


def cache_key(stack_sha: str, venv: str, shape: CacheShape) -> str:
    return f"{stack_id(stack_sha, venv)}-{shape.sha}"


def cache_dir(key: str) -> str:
    return f"{CACHE_ROOT}/{key}"


def cache_env(directory: str) -> list[tuple[str, str]]:
    """The variables that point every kernel and JIT cache of the stack at `directory` (sorted by name)."""
    return sorted([
        ("SGLANG_CACHE_DIR", directory),  # sglang's own: flashinfer/autotune/<fi version>/sm<NN>/<key>/ under it
        ("TRITON_CACHE_DIR", f"{directory}/triton"),
        ("FLASHINFER_WORKSPACE_BASE", directory),  # flashinfer's JIT: <base>/.cache/flashinfer/…
        ("SGLANG_DG_CACHE_DIR", f"{directory}/deep_gemm"),
        ("DG_JIT_CACHE_DIR", f"{directory}/deep_gemm"),
        # sglang's own JIT kernels (fused rope, activation, KV-cache stores) build through tvm-ffi's load_inline,
        # default ~/.cache/tvm-ffi (apache-tvm-ffi 0.1.9, tvm_ffi/cpp/extension.py)
        ("TVM_FFI_CACHE_DIR", f"{directory}/tvm-ffi"),
        ("SGLANG_JIT_CACHE_DIR", f"{directory}/sglang-jit"),  # sglang 0.5.23's jit_kernel (~/.cache/sglang/jit)
        ("TILELANG_CACHE_DIR", f"{directory}/tilelang"),  # the NSA/DSA indexer kernels (~/.tilelang/cache)
        ("CUDA_CACHE_PATH", f"{directory}/cuda"),  # the driver's PTX JIT (~/.nv/ComputeCache)
        ("CUTE_DSL_CACHE_DIR", f"{directory}/cute-dsl"),  # nvidia-cutlass-dsl (/tmp: a tmpfs on Debian 13)
        ("TORCHINDUCTOR_CACHE_DIR", f"{directory}/inductor"),  # torch.compile (/tmp/torchinductor_<user>)
    ])


def manifest(key: str, stack_sha: str, venv: str, shape: CacheShape) -> dict[str, Any]:
    return {"key": key, "stack": stack_sha, "venv": venv, "shape": shape.as_dict()}


def release_cache(env: Mapping[str, str], model_path: str, stack_sha: str, venv: str,
                  flags: Mapping[str, Any]) -> CacheMeta | None:
    """The kernel cache of a release with `flags` on the stack (`stack_sha`, `venv`) the server runs; None when the
    profile's `env` points the caches somewhere itself (SGLANG_CACHE_DIR): the operator's own directory is left
    alone. Here, not in steps/: it is the stack's concern, and a step module importing steps/software for it made a
    file circle (issue 47)."""
    if OWN_CACHE_VAR in env:
        return None
    shape = CacheShape.from_flags(model_path, flags)
    key = cache_key(stack_sha, venv, shape)
    return CacheMeta(dir=cache_dir(key), key=key, manifest=manifest(key, stack_sha, venv, shape))


CacheState = Literal["warm", "fresh", "set-aside", "unchecked", "absent", "failing"]


class CacheCheck(BaseModel):
    """What the check of a release's cache found. Before a start: `warm` (its own manifest, readable results),
    `fresh` (created now), `set-aside` (failed its check: renamed and created again), `unchecked` (the check could
    not run). A look without a start (`deploy status`): `warm`, `absent` (the next start is cold) or `failing`
    (the next start sets it aside)."""

    model_config = ConfigDict(frozen=True)

    dir: str
    state: CacheState
    reason: str = ""
    moved_to: str = ""

    @property
    def cold(self) -> bool:
        """The start this check came before compiles and autotunes from nothing."""
        return self.state in ("fresh", "set-aside", "absent", "failing")

    def line(self) -> str:
        if self.state == "set-aside":
            return (f"kernel cache {self.dir} failed its check ({self.reason}): set aside as {self.moved_to}, "
                    "rebuilt by this start")
        if self.state == "unchecked":
            return f"kernel cache {self.dir} could not be checked ({self.reason})"
        if self.state == "fresh":
            why = f" ({self.reason})" if self.reason else ""
            return f"kernel cache {self.dir} is new{why}: this start compiles and autotunes (cold)"
        if self.state == "absent":
            why = f" ({self.reason})" if self.reason else ""
            return f"kernel cache {self.dir} is not there yet{why}: the next start is cold"
        if self.state == "failing":
            return f"kernel cache {self.dir} fails its check ({self.reason}): the next start sets it aside"
        return f"kernel cache {self.dir} is warm (its own stack and shape)"


#: Set-aside cache directories kept in the cache root (the newest; older ones are removed by the next set-aside).
KEEP_SET_ASIDE = 2
#: The cache root's one shared place for flashinfer's cubins (`<this>/<flashinfer version>/`), not a stack's cache.
SHARED_CUBINS = "flashinfer-cubins"

#: Run inside the container with python3, argv: the release's meta.json and `start` (before a start: prepare the
#: directory, set a failing one aside) or `look` (read only). Reads meta's `cache` ({"dir", "manifest"}); prints
#: nothing for a release without one (an earlier deploy's), else one line `DEPLOY_CACHE={"dir", "state", "reason",
#: "moved_to"}`. Never fails the start: a check that cannot run says so.
CHECK_PROGRAM = r'''
import json, os, shutil, sys, time
KEEP = @KEEP@
try:
    with open(sys.argv[1]) as fh:
        spec = json.load(fh).get("cache") or {}
    d, want = spec["dir"], spec["manifest"]
except (OSError, ValueError, KeyError, TypeError, AttributeError):
    sys.exit(0)
look = sys.argv[2:] == ["look"]
m = os.path.join(d, "deploy-cache.json")
def say(state, reason="", moved=""):
    if state in ("fresh", "set-aside"):
        os.makedirs(d, exist_ok=True)
        with open(m + ".tmp", "w") as fh:
            json.dump(want, fh, sort_keys=True)
        os.replace(m + ".tmp", m)
    print("DEPLOY_CACHE=" + json.dumps({"dir": d, "state": state, "reason": reason, "moved_to": moved}))
# flashinfer's default cubin dir under FLASHINFER_WORKSPACE_BASE
CUBINS = os.path.join(".cache", "flashinfer", "cubins")
def written(d):
    """Anything but the manifest and the shared-cubin link: a start wrote kernels."""
    link = os.path.join(d, CUBINS)
    for root, dirs, files in os.walk(d):
        if [f for f in files if not (root == d and f == "deploy-cache.json")]:
            return True
        if [x for x in dirs if os.path.islink(os.path.join(root, x)) and os.path.join(root, x) != link]:
            return True
        if root != d and not dirs and not files and not link.startswith(root + os.sep):
            return True  # an empty directory of its own (a start made it)
    return False
def link_cubins(d, venv):
    """Point the cache's flashinfer cubin dir at one shared, version-keyed place: the cubins a stack without
    flashinfer-cubin downloads are the same for every shape, and a few hundred MB each."""
    try:
        site = [p for p in os.listdir(os.path.join(venv, "lib")) if p.startswith("python3")]
        infos = [n for s in site for n in os.listdir(os.path.join(venv, "lib", s, "site-packages"))
                 if n.startswith("flashinfer_python-") and n.endswith(".dist-info")]
    except OSError:
        return
    if len(infos) != 1:
        return
    version = infos[0][len("flashinfer_python-"):-len(".dist-info")]
    shared = os.path.join(os.path.dirname(d), "@CUBINS@", version)
    link = os.path.join(d, CUBINS)
    try:
        if os.path.islink(link):
            if os.readlink(link) == shared:
                return
            os.unlink(link)
        elif os.path.isdir(link):
            if os.path.exists(shared):
                return  # its own cubins beside a shared copy: left alone, still valid
            os.makedirs(os.path.dirname(shared), exist_ok=True)
            os.rename(link, shared)
        os.makedirs(shared, exist_ok=True)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(shared, link)
    except OSError:
        pass
try:
    if not os.path.isdir(d):
        say("absent" if look else "fresh")
        if not look:
            link_cubins(d, want.get("venv") or "")
        sys.exit(0)
    reason = ""
    try:
        with open(m) as fh:
            have = json.load(fh)
        if have != want:
            reason = "its manifest names stack %s, shape %s" % (have.get("stack"), have.get("shape"))
    except (OSError, ValueError, AttributeError) as exc:
        reason = "no readable manifest (%s)" % type(exc).__name__
    if not reason:
        for root, _dirs, files in sorted(os.walk(os.path.join(d, "flashinfer", "autotune"))):
            for f in sorted(files):
                if f.endswith(".json"):
                    try:
                        with open(os.path.join(root, f)) as fh:
                            json.load(fh)
                    except (OSError, ValueError):
                        reason = "unreadable autotune file %s" % os.path.relpath(os.path.join(root, f), d)
                        break
            if reason:
                break
    if not reason and not written(d):
        # its manifest and nothing else: the start after the check ended before it wrote a kernel (a real
        # 0.5.12.post1 that died parsing its flags left exactly this); the next start compiles everything
        say("absent" if look else "fresh", "it holds only its manifest: no start has written a kernel to it yet")
    elif not reason:
        say("warm")
    elif look:
        say("failing", reason)
    else:
        base = moved = d + ".set-aside-" + time.strftime("%Y%m%dT%H%M%S")
        n = 1
        while os.path.exists(moved):
            n += 1
            moved = "%s-%d" % (base, n)
        os.rename(d, moved)
        root = os.path.dirname(d)
        aside = sorted((os.path.join(root, n) for n in os.listdir(root) if ".set-aside-" in n),
                       key=lambda p: os.lstat(p).st_mtime)
        for old in aside[:-KEEP] if len(aside) > KEEP else []:
            if not os.path.islink(old):
                shutil.rmtree(old, ignore_errors=True)
        say("set-aside", reason, moved)
    if not look:
        link_cubins(d, want.get("venv") or "")
except OSError as exc:
    print("DEPLOY_CACHE=" + json.dumps({"dir": d, "state": "unchecked", "reason": str(exc), "moved_to": ""}))
'''.replace("@KEEP@", str(KEEP_SET_ASIDE)).replace("@CUBINS@", SHARED_CUBINS)


def check_shell(meta_path: str, *, look: bool = False) -> str:
    """The container command that checks a release's cache (before a start: and prepares it); never fails."""
    mode = "look" if look else "start"
    return f"python3 -c {shlex.quote(CHECK_PROGRAM)} {shlex.quote(meta_path)} {mode} 2>/dev/null || true"


def parse_check(stdout: str) -> CacheCheck | None:
    """The check's `DEPLOY_CACHE=` line, or None when it printed none (a release without a managed cache)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("DEPLOY_CACHE="):
            try:
                return CacheCheck.model_validate_json(line.split("=", 1)[1])
            except ValueError:
                return None
    return None
