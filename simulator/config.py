"""Models, paths and fault knobs shared by every part of the simulated host (see docs/simulator.md).

Plain dataclasses with explicit JSON round-tripping instead of pydantic: these are read on every simulated SSH
command, and importing pydantic would add ~100 ms to each one. Unknown keys in a JSON file are an error so that a
typo in a fault knob is caught instead of silently ignored.

Writers take an exclusive `fcntl` lock on `<file>.lock` and replace the file atomically, because the manager, the
API server and `pct` all update the same files concurrently.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from simulator import layout
from simulator.layout import HOST_ENV as HOST_ENV
from simulator.layout import HOST_OVERLAYS as HOST_OVERLAYS
from simulator.layout import ROOT_ENV as ROOT_ENV

# ---------------------------------------------------------------------------------------------------------------
# Environment and fixed locations
# ---------------------------------------------------------------------------------------------------------------

DEFAULT_ROOT = Path(layout.DEFAULT_ROOT)
VIEW_ALIAS = Path(layout.VIEW_ALIAS)
VIEW_PY = Path(layout.VIEW_PY)
VIEW_VENV = Path(layout.VIEW_VENV)
VIEW_REPO = Path(layout.VIEW_REPO)
VIEW_ROOT = Path(layout.VIEW_ROOT)
VIEW_PYTHON = Path(layout.VIEW_PYTHON)

SSH_PORT = 2222
API_PORT = 8006
DEFAULT_VMID = 120

GpuProfile = Literal["rtx-pro-6000-x8", "rtx-pro-6000-x8-vm", "h200-x2"]
GPU_PROFILES: tuple[str, ...] = ("rtx-pro-6000-x8", "rtx-pro-6000-x8-vm", "h200-x2")
#: Driver version of the real capture behind each profile (fixtures/nvidia-smi/README.md).
PROFILE_DRIVER: dict[str, str] = {
    "rtx-pro-6000-x8": "595.58.03",
    "rtx-pro-6000-x8-vm": "595.58.03",
    "h200-x2": "580.159.04",
}
PROFILE_GPU_COUNT: dict[str, int] = {"rtx-pro-6000-x8": 8, "rtx-pro-6000-x8-vm": 8, "h200-x2": 2}

TaskType = str  # vzcreate, vzstart, vzstop, vzshutdown, vzdestroy, download, ...


# ---------------------------------------------------------------------------------------------------------------
# JSON models
# ---------------------------------------------------------------------------------------------------------------

T = TypeVar("T")


def _from_dict(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build a dataclass from a dict; unknown keys are an error naming the file, missing keys take defaults."""
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return cls(**data)


@dataclass
class HostFaults:
    """Host-wide fault knobs. Each one models a failure seen on real hosts.

    missing_uvm: /dev/nvidia-uvm(-tools) absent and `nvidia-uvm` missing from /proc/devices until
        `nvidia-modprobe -u -c=0` runs (nothing used UVM since boot) -> `pct start` fails on a devN entry.
    ssh_drop_after: the SSH session running command number N+1 (counted per host) is killed abruptly, once;
        the knob then clears itself so the next connection works.
    task_fail: PVE task type ("vzstart", "vzcreate", "download", ...) or "all": matching tasks end with
        `TASK ERROR: ...`.
    api_delay_s: every HTTPS API response is delayed by this many seconds (timeouts, retry logic).
    driver_reload: a host reboot or NVIDIA driver reload gave nvidia-uvm another dynamic major (one below the
        capture's): /proc/devices and /dev/nvidia-uvm(-tools) change at once; a running container keeps the nodes
        it was started with (stale major, denied by its devices cgroup) until it is restarted. Setting it also
        drops every power limit `nvidia-smi -pl` set (a fresh module; the simulator runs no udev rule).
    hub_cut_after_bytes: the model hub stand-in serves this many bytes of LFS file bodies (the shards, which the
        real Hub serves from its Xet storage or CDN: xorb fetches and plain bodies alike; counted from when the knob
        is set), then cuts every such transfer at once, as a link that went down: `hf download` retries (hf_xet:
        about 170 s), gives up and deletes its partial files; the small files (config.json) still come. None
        clears it.
    aplinfo: the node's appliance index (`GET/POST /nodes/N/aplinfo`) lists these template names (comma-separated)
        instead of today's (an index from another time; an empty string: `pveam update` never ran). None: today's.
    task_hold: PVE task type: a matching task's worker stops at its hold point until the knob is cleared (vzcreate:
        the archive unpacked, the real config not yet written, so the CT is still `lock: create`), as a slow
        unpack on a loaded node holds it; a test then sees the task mid-way instead of racing it.
    xid, gpu_lost, ecc, remap, clocks_event, link, recovery: GPU hardware faults in the real formats
        (simulator/gpu/health.py):
        `xid="79@3,13@0"` writes real NVRM Xid lines into the host's kernel log (79 also loses the GPU); `gpu_lost=3`
        makes nvidia-smi print its real "GPU is lost" error for GPU 3; `ecc="3:2"` two uncorrectable volatile DRAM
        errors; `remap="3:pending"` or `"3:failed"`; `clocks_event="3:hw_thermal"`; `link="3:stuck-gen2"` (Gen2
        under load too) or `"3:idle-downshift"` (Gen1 idle, full speed under load); `recovery="3:reboot"` the driver's
        recovery action (reset, reboot, drain_p2p, drain_reset: its Xid 154 line and `nvidia-smi -q`'s GPU Recovery
        Action). A host reboot clears the lost GPU, pending remaps, the recovery action and the kernel log.
    no_quorum: the node lost quorum (a cluster partition): /etc/pve is read-only, so every API call (and `pct`,
        `pvesh`) that writes answers pve-cluster's `cluster not ready - no quorum?`; `/cluster/status` says
        `quorate: 0`. Reads still work.
    """

    missing_uvm: bool = False
    ssh_drop_after: int | None = None
    task_fail: str | None = None
    api_delay_s: float = 0.0
    driver_reload: bool = False
    hub_cut_after_bytes: int | None = None
    aplinfo: str | None = None
    task_hold: str | None = None
    xid: str | None = None
    gpu_lost: int | None = None
    ecc: str | None = None
    remap: str | None = None
    clocks_event: str | None = None
    link: str | None = None
    recovery: str | None = None
    no_quorum: bool = False


@dataclass
class CtFaults:
    """Per-container fault knobs, consumed by the part-2 stand-ins (model server, provisioning).

    driver_mismatch: userspace driver version the container reports instead of the host's (installer mismatch).
    crash_on_start: the model server exits with a traceback shortly after starting.
    health_never_ok: /health stays 503 forever (start timeout).
    log_line: an extra line the model server logs (e.g. a NaN warning or "Unsupported architecture").
    slow_start_s: extra seconds before the model server becomes healthy.
    fatal: a verdict code of the tool's known fatal lines (FATAL_FAULTS): the model server prints that failure's
        real line where the real server does (during CUDA-graph capture, or at the first decode) and exits;
        `capture-stuck` stalls in capture instead (no line, like health_never_ok).
    match: the server faults above apply only when the server's command line contains this text (e.g.
        "--num-continuous-decode-steps 16"): a flag set that crashes, while the previous release still starts.
    perf_noise, perf_seed: a noisy machine: the model server's every busy period runs slower or faster by one
        factor drawn from N(1, perf_noise) seeded by (perf_seed, period) (sglang_standin README, "Noise").
    full_disk: a directory in the running container (e.g. /etc/sglang) covered at once by a small tmpfs that holds
        a copy of its files and is filled to the last byte: reads work, every write fails with ENOSPC, as on a
        full filesystem. None (or "") unmounts it, and the directory's own files are back.
    small_disk: `DIR:SIZE` (e.g. /models:3m): DIR in the running container becomes a filesystem of its own of SIZE
        (a tmpfs holding a copy of DIR's files), so a download into it fills it and fails with ENOSPC midway, as a
        400 GB download fills a real disk. Setting it again for the same DIR with a larger SIZE grows it in place,
        files kept (the operator made room); None (or "") unmounts it: what was written there is gone.
    output: what /generate with logprobs answers (OUTPUTS): garbage (random tokens, control characters), zeros
        (token 0, flat logprobs: a GEMM returning zeros), nan (NaN logprobs, written null), repeat (one token looped),
        ok (or None): the right answer. Chat completions stay right, so a regex smoke check passes (as upstream).
    drift: a small deterministic change of logprobs (chosen tokens by up to `drift`, low-probability alternatives
        by up to 5x, a few swapped): batched-kernel nondeterminism that the correctness gate must tolerate.
    stall_after: after this many finished generations the model server stops scheduling: requests hang, its token
        counters stop, /health stays 200 (sglang#22779: alive but not serving). Read when the server starts.
    slow_prefill_s: real seconds every prefill takes, in chunks that advance the prefill token counter (a long
        GLM-5 prompt, sglang#22511): slow but making progress.
    warm_start_s: model seconds of every start (weights loaded from the page cache, CUDA graphs captured); None:
        the stand-in's 2 s. A real GLM-5 warm start is minutes.
    cold_start_s: model seconds a start adds when its kernel cache is empty (JIT compile, first-start downloads),
        once per cache: the stand-in marks the cache after its first start becomes ready, as the real JIT caches fill.
    power_draw: the GPUs draw this many times the stand-in's modelled power (capped at the limit; re-read every
        half second): kernels that saturate the GPUs, a draw a power cap binds on (the model's decode draws ~140 W of
        an RTX PRO 6000's 600 W, under its lowest limit, 300 W). Modelled, like the cap's cost (_sim/powercap.py).
    ha_managed: the CT is an HA resource (ct:VMID in /etc/pve/ha/resources.cfg): a start, stop or shutdown is a
        request to the HA manager (task `hastart`/`hastop`, "Requesting HA start for CT VMID") that ends OK at once;
        the CT changes state `ha_delay_s` real seconds later (simulator/pve/ha.py), as the HA stack acts on it.
    kernel_shape: what the model server's profiler traces (/start_profile) show a decode step spend its time on
        (KERNEL_SHAPES): collective (the all-reduce), moe, attention, host (the GPU idle between kernels) or
        slow_rank (one rank works longer; the others wait for it in the all-reduce); None: a balanced MoE decode.
        Read at each profile, so it applies to the next window without a restart.
    slow_rank: the slow rank of kernel_shape=slow_rank (None: the last rank).
    """

    driver_mismatch: str | None = None
    crash_on_start: bool = False
    health_never_ok: bool = False
    log_line: str | None = None
    slow_start_s: float = 0.0
    fatal: str | None = None
    match: str | None = None
    full_disk: str | None = None
    small_disk: str | None = None
    output: str | None = None
    drift: float = 0.0
    perf_noise: float = 0.0
    perf_seed: int = 0
    stall_after: int | None = None
    ha_managed: bool = False
    ha_delay_s: float = 3.0
    slow_prefill_s: float = 0.0
    warm_start_s: float | None = None
    cold_start_s: float = 0.0
    kernel_shape: str | None = None
    slow_rank: int | None = None
    power_draw: float = 1.0


#: The values of CtFaults.kernel_shape (the stand-in's profiler, sglang_standin/sglang/_sim/profiler.py).
KERNEL_SHAPES = ("collective", "moe", "attention", "host", "slow_rank")


#: The values of CtFaults.output (the stand-in server's /generate answers; simulator/sglang_standin golden.py).
OUTPUTS = ("ok", "garbage", "zeros", "nan", "repeat")


#: The values of CtFaults.fatal (the stand-in server knows each one's line and phase).
FATAL_FAULTS = ("unsupported-arch", "illegal-memory-access", "cuda-graph-oom", "nccl-timeout", "capture-stuck",
                "cubin-fetch")


class RetiredRuntime(ValueError):
    """host.json of a host made for a container runtime that no longer exists (`view`: mount views, no LXC)."""

    def __init__(self, where: str, runtime: str):
        root = Path(where).parent.parent.parent  # <root>/hosts/<name>/host.json
        super().__init__(f"{where}: this host was made for the retired {runtime!r} container runtime, which no "
                         f"longer exists (containers are real LXC containers now); stop it with `deploy sim down "
                         f"--root {root}`, remove {root}, then run `deploy sim up` again")
        self.root, self.host = root, Path(where).parent.name


@dataclass
class HostConfig:
    """host.json: one simulated PVE node. Written by the manager, read by everyone."""

    name: str
    address: str
    node: str
    sim_id: str
    ssh_port: int = SSH_PORT
    api_port: int = API_PORT
    pve_version: str = "9.1.2"
    gpu_profile: str = "rtx-pro-6000-x8"
    driver_version: str = PROFILE_DRIVER["rtx-pro-6000-x8"]
    #: Multiplier for simulated durations (model load, bench): 0.01 makes a 10-minute load take 6 s.
    time_scale: float = 1.0
    faults: HostFaults = field(default_factory=HostFaults)
    #: The host side of the container bridge, where simulator services for containers listen.
    bridge_address: str | None = None
    #: The PVE cluster this node belongs to (`sim up --cluster NAME`), None for a standalone node
    #: (simulator/pve/cluster.py).
    cluster: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "host.json") -> HostConfig:
        data = dict(data)
        runtime = data.pop("runtime", "lxc")  # hosts made while there were two container runtimes
        if runtime != "lxc":
            raise RetiredRuntime(where, str(runtime))
        data["faults"] = _from_dict(HostFaults, data.get("faults") or {}, f"{where}: faults")
        return _from_dict(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def gpu_count(self) -> int:
        return PROFILE_GPU_COUNT[self.gpu_profile]


@dataclass
class CtState:
    """ct/<vmid>/state.json: runtime state that PVE keeps outside the conf file, plus the container's faults."""

    vmid: int
    status: Literal["running", "stopped"] = "stopped"
    started_at: float | None = None
    faults: CtFaults = field(default_factory=CtFaults)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "state.json") -> CtState:
        data = dict(data)
        for legacy in ("netns", "userspace_driver"):  # written while the retired view runtime existed
            data.pop(legacy, None)
        data["faults"] = _from_dict(CtFaults, data.get("faults") or {}, f"{where}: faults")
        return _from_dict(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RootConfig:
    """<root>/sim.json: how this machine's Python and repo are reached from inside the views."""

    real_root: str
    python_prefix: str  # sys.base_prefix, aliased at VIEW_PY
    python_exe_rel: str  # interpreter path relative to python_prefix
    venv_prefix: str | None  # sys.prefix if it differs (virtualenv), aliased at VIEW_VENV
    venv_site: str | None  # the venv's site-packages relative to venv_prefix
    repo: str  # directory containing the orchestrator package, aliased at VIEW_REPO

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "sim.json") -> RootConfig:
        return _from_dict(cls, data, where)


# ---------------------------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------------------------


def sim_root() -> Path:
    """The state root: $DEPLOY_SIM_ROOT (inside views this is the VIEW_ROOT alias), else the default."""
    return Path(layout.sim_root_dir())


def sim_id_for(root: Path) -> str:
    """Short id unique per state root, used in bridge and nft table names so two sim roots never collide."""
    import hashlib  # here: every simulated command imports this module, few ask for an id

    return hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:6]


@dataclass(frozen=True)
class SimPaths:
    root: Path

    @property
    def hosts(self) -> Path:
        return self.root / "hosts"

    @property
    def bin_host(self) -> Path:
        return self.root / "bin" / "host"

    @property
    def python_launcher(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yaml"

    @property
    def root_config(self) -> Path:
        return self.root / "sim.json"

    def host(self, name: str) -> HostPaths:
        return HostPaths(self.hosts / name)

    def host_names(self) -> list[str]:
        if not self.hosts.is_dir():
            return []
        return sorted(p.name for p in self.hosts.iterdir() if (p / "host.json").is_file())


@dataclass(frozen=True)
class HostPaths:
    dir: Path

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def config(self) -> Path:
        return self.dir / "host.json"

    @property
    def sshd(self) -> Path:
        return self.dir / "sshd"

    @property
    def client(self) -> Path:
        return self.dir / "client"

    @property
    def api(self) -> Path:
        return self.dir / "api"

    @property
    def fs(self) -> Path:
        return self.dir / "fs"

    @property
    def gpu(self) -> Path:
        return self.dir / "gpu"

    @property
    def tasks(self) -> Path:
        return self.dir / "tasks"

    @property
    def lxc_conf_dir(self) -> Path:
        return self.fs / "etc" / "pve" / "lxc"

    @property
    def template_cache(self) -> Path:
        return self.fs / "var" / "lib" / "vz" / "template" / "cache"

    @property
    def ssh_counter(self) -> Path:
        return self.sshd / "command-count"

    def conf(self, vmid: int) -> Path:
        return self.lxc_conf_dir / f"{vmid}.conf"

    def ct(self, vmid: int) -> CtPaths:
        return CtPaths(self.dir / "ct" / str(vmid))

    def load(self) -> HostConfig:
        return HostConfig.from_dict(json.loads(self.config.read_text()), str(self.config))

    def save(self, cfg: HostConfig) -> None:
        write_json(self.config, cfg.to_dict())

    def update(self, fn: Callable[[HostConfig], None]) -> HostConfig:
        """Read-modify-write host.json under its lock."""
        with locked(self.config):
            cfg = self.load()
            fn(cfg)
            write_json(self.config, cfg.to_dict(), lock=False)
        return cfg


@dataclass(frozen=True)
class CtPaths:
    dir: Path

    @property
    def vmid(self) -> int:
        return int(self.dir.name)

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    def load(self) -> CtState:
        if not self.state.is_file():
            return CtState(vmid=self.vmid)
        return CtState.from_dict(json.loads(self.state.read_text()), str(self.state))

    def save(self, st: CtState) -> None:
        write_json(self.state, st.to_dict())

    def update(self, fn: Callable[[CtState], None]) -> CtState:
        with locked(self.state):
            st = self.load()
            fn(st)
            write_json(self.state, st.to_dict(), lock=False)
        return st


def current_host() -> HostPaths:
    """The host of the current SSH session / stand-in process ($DEPLOY_SIM_HOST under $DEPLOY_SIM_ROOT)."""
    return HostPaths(Path(layout.current_host_dir()))


# ---------------------------------------------------------------------------------------------------------------
# Locked, atomic JSON files
# ---------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on `<path>.lock` (the data file itself is replaced, so it cannot carry the lock)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a stale one (or a link) goes; O_EXCL then never writes through a link
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_json(path: Path, data: Any, lock: bool = True) -> None:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if lock:
        with locked(path):
            write_text_atomic(path, text)
    else:
        write_text_atomic(path, text)
