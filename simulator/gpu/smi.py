"""The `nvidia-smi` stand-in (the host's, and the one the .run stand-in installs in a container).

Why it decides the way it does:
- Host: the kernel module is loaded, every GPU of the profile is visible.
- Container (simulator/ctside.py's mounts): nvidia-smi talks to the driver through the device nodes passed
  into the container, so visibility follows `/dev/nvidiactl` and `/dev/nvidia<minor>` (minor, not index!), and
  NVML refuses to start when the container's userspace version differs from the host kernel module.
Output layouts are the real captured ones; see profiles.py / topo.py.

Cost: the tool runs four of these per facts read in every container, so a run imports only builtin modules and
`os` (plus `datetime` for the modes that print a time): no pathlib, dataclasses, typing, re or json, which cost
three times the run's own work. The modules it imports (simctx, profiles, telemetry, topo, jsonfile,
simulator.derived) keep to that; tests/sim/software/test_gpu.py checks it.
"""

from __future__ import annotations

import _signal  # not `signal`: it imports enum (and re's cost with it) for its IntEnum wrappers
import os
import sys
import time

from . import health, powercap, telemetry
from .profiles import get_profile
from .simctx import context_from_ctside, context_from_env
from .topo import topo_m, topo_p2p

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TextIO

    from .profiles import Gpu, GpuProfile
    from .simctx import SimContext

FAIL_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
NVML_LINK = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"  # what the .run stand-in installs in a container
NO_NVML = ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
           "Display Driver is properly installed and present in your system.\nPlease also try adding directory "
           "that contains libnvidia-ml.so to your system PATH.\n")


class SmiExit(Exception):
    """Terminate with `code` after printing `text` (to stdout, as nvidia-smi does)."""

    def __init__(self, code: int, text: str = "", stderr: bool = False) -> None:
        super().__init__(text)
        self.code, self.text, self.stderr = code, text, stderr


class View:
    __slots__ = ("driver_version", "faults", "gpus", "load_root", "profile")

    def __init__(self, profile: GpuProfile, driver_version: str, gpus: list[Gpu], load_root: str,
                 faults: dict[str, Any] | None = None) -> None:
        self.profile = profile
        self.driver_version = driver_version
        self.gpus = gpus  # visible GPUs, renumbered by position
        self.load_root = load_root  # its gpu/ holds the servers' load files (SimContext.load_root)
        self.faults = faults or {}  # the host's fault knobs (simulator/gpu/health.py reads the GPU ones)

    def lost(self, index: int) -> bool:
        """The GPU at `index` fell off the bus (host knob gpu_lost, or an Xid 79)."""
        return self.faults.get("gpu_lost") == index


def host_driver_version(ctx: SimContext, profile: GpuProfile) -> str:
    return str(ctx.host_json.get("driver_version") or profile.driver_version)


def userspace_version(ctx: SimContext) -> str | None:
    """The container's NVIDIA userspace version: the one its libnvidia-ml.so.1 links to (as real NVML reports its
    own), as the installer stand-in left it."""
    if ctx.ct_root is None:
        return None
    link = os.path.join(ctx.ct_root, NVML_LINK.lstrip("/"))
    target = os.readlink(link) if os.path.islink(link) else ""
    return target.rsplit("libnvidia-ml.so.", 1)[1] if "libnvidia-ml.so." in target else None


def _any_gpu_node(dev: str) -> bool:
    """Whether `dev` has a /dev/nvidia<N> node (what the glob nvidia[0-9]* with an all-digit tail finds)."""
    try:
        names = os.listdir(dev)
    except OSError:
        return False
    return any(n.startswith("nvidia") and "0" <= n[6:7] <= "9" and n[6:].isdigit() for n in names)


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _nvml_makes_nodes(ctx: SimContext, profile: GpuProfile) -> None:
    """On the host (root), NVML runs nvidia-modprobe for a missing /dev/nvidiactl or /dev/nvidiaN, as the real
    nvidia-smi does after a boot left none (simulator/host/reboot.py). Imported only then: it is rare and not
    builtin."""
    dev = os.path.join(ctx.host_dir, "fs", "dev")  # the host view's /dev (a bind of it)
    if all(os.path.exists(os.path.join(dev, f"nvidia{g.minor}")) for g in profile.gpus) \
            and os.path.exists(os.path.join(dev, "nvidiactl")):
        return
    from pathlib import Path

    from .modprobe import nvml_makes_nodes

    nvml_makes_nodes(Path(ctx.host_dir) / "fs", [g.minor for g in profile.gpus], profile.caps_major)


def resolve_view(ctx: SimContext) -> View:
    profile = get_profile(ctx.profile_name)
    driver = host_driver_version(ctx, profile)
    faults = ctx.host_json.get("faults") or {}
    if ctx.vmid is None:
        _nvml_makes_nodes(ctx, profile)
        return View(profile, driver, list(profile.gpus), ctx.load_root, faults)
    user = userspace_version(ctx)
    if user is None:
        raise SmiExit(12, NO_NVML)
    dev = ctx.dev_dir
    if not os.path.exists(os.path.join(dev, "nvidiactl")):
        raise SmiExit(9, FAIL_DRIVER)
    visible = [g for g in profile.gpus if os.path.exists(os.path.join(dev, f"nvidia{g.minor}"))]
    if not visible and not _any_gpu_node(dev):
        raise SmiExit(9, FAIL_DRIVER)
    if user != driver:
        short = ".".join(user.split(".")[:2])
        raise SmiExit(18, "Failed to initialize NVML: Driver/library version mismatch\n"
                      f"NVML library version: {short}\n")
    if not visible:
        raise SmiExit(6, "No devices were found\n")
    return View(profile, driver, visible, ctx.load_root, faults)


# ---------------------------------------------------------------------------------------------- query-gpu

if TYPE_CHECKING:
    Getter = Callable[[Gpu, int, telemetry.Sample, View, float], str]


def _ts(now: float) -> str:
    import datetime as dt

    t = dt.datetime.fromtimestamp(now)
    return t.strftime("%Y/%m/%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _gen(g: Gpu, i: int, s: telemetry.Sample, v: View) -> int:
    return health.link_gen(v.faults, v.profile.gpus.index(g), s.pcie_gen, v.profile.pcie_max_gen, s.util_gpu > 0)


def _w(x: float) -> str:
    return f"{x:.2f}"


FIELDS: dict[str, tuple[str, Getter]] = {
    "timestamp": ("", lambda g, i, s, v, now: _ts(now)),
    "driver_version": ("", lambda g, i, s, v, now: v.driver_version),
    "count": ("", lambda g, i, s, v, now: str(len(v.gpus))),
    "name": ("", lambda g, i, s, v, now: g.name),
    "serial": ("", lambda g, i, s, v, now: g.serial),
    "uuid": ("", lambda g, i, s, v, now: g.uuid),
    "pci.bus_id": ("", lambda g, i, s, v, now: g.bus_id),
    "index": ("", lambda g, i, s, v, now: str(i)),
    "vbios_version": ("", lambda g, i, s, v, now: g.vbios),
    "persistence_mode": ("", lambda g, i, s, v, now: "Enabled"),
    "pstate": ("", lambda g, i, s, v, now: s.pstate),
    "compute_mode": ("", lambda g, i, s, v, now: "Default"),
    "fan.speed": ("%", lambda g, i, s, v, now: "[N/A]"),
    "power.draw": ("W", lambda g, i, s, v, now: _w(s.power_avg_w)),
    "power.draw.average": ("W", lambda g, i, s, v, now: _w(s.power_avg_w)),
    "power.draw.instant": ("W", lambda g, i, s, v, now: _w(s.power_w)),
    "power.limit": ("W", lambda g, i, s, v, now: _w(s.limit_w)),
    "enforced.power.limit": ("W", lambda g, i, s, v, now: _w(s.limit_w)),
    "power.default_limit": ("W", lambda g, i, s, v, now: _w(v.profile.power_limit_w)),
    "power.max_limit": ("W", lambda g, i, s, v, now: _w(v.profile.power_limit_w)),
    "power.min_limit": ("W", lambda g, i, s, v, now: _w(v.profile.power_min_w)),
    "utilization.gpu": ("%", lambda g, i, s, v, now: str(s.util_gpu)),
    "utilization.memory": ("%", lambda g, i, s, v, now: str(s.util_mem)),
    "memory.total": ("MiB", lambda g, i, s, v, now: str(g.mem_total_mib)),
    "memory.used": ("MiB", lambda g, i, s, v, now: str(s.mem_used_mib)),
    "memory.free": ("MiB", lambda g, i, s, v, now: str(g.mem_total_mib - s.mem_used_mib)),
    "temperature.gpu": ("", lambda g, i, s, v, now: str(s.temp_c)),
    "temperature.memory": ("", lambda g, i, s, v, now: "N/A" if s.mem_temp_c is None else str(s.mem_temp_c)),
    "clocks.current.sm": ("MHz", lambda g, i, s, v, now: str(s.sm_mhz)),
    "clocks.current.graphics": ("MHz", lambda g, i, s, v, now: str(s.sm_mhz)),
    "clocks.current.memory": ("MHz", lambda g, i, s, v, now: str(s.mem_mhz)),
    "clocks.max.sm": ("MHz", lambda g, i, s, v, now: str(v.profile.max_sm_mhz)),
    "clocks.max.graphics": ("MHz", lambda g, i, s, v, now: str(v.profile.max_sm_mhz)),
    "clocks.max.memory": ("MHz", lambda g, i, s, v, now: str(v.profile.max_mem_mhz)),
    "pcie.link.gen.current": ("", lambda g, i, s, v, now: str(_gen(g, i, s, v))),
    "pcie.link.gen.gpucurrent": ("", lambda g, i, s, v, now: str(_gen(g, i, s, v))),
    "pcie.link.gen.max": ("", lambda g, i, s, v, now: str(v.profile.pcie_max_gen)),
    "pcie.link.gen.gpumax": ("", lambda g, i, s, v, now: str(v.profile.pcie_max_gen)),
    "pcie.link.gen.hostmax": ("", lambda g, i, s, v, now: str(v.profile.pcie_max_gen)),
    "pcie.link.width.current": ("", lambda g, i, s, v, now: str(v.profile.pcie_width)),
    "pcie.link.width.max": ("", lambda g, i, s, v, now: str(v.profile.pcie_width)),
    "clocks_event_reasons.active": (
        "", lambda g, i, s, v, now: "0x0000000000000004" if s.pviol else "0x0000000000000000"),
    "clocks_event_reasons.sw_power_cap": ("", lambda g, i, s, v, now: "Active" if s.pviol else "Not Active"),
}
ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "clocks.sm": "clocks.current.sm", "clocks.gr": "clocks.current.graphics", "clocks.mem": "clocks.current.memory",
    "clocks.max.gr": "clocks.max.graphics", "clocks.max.mem": "clocks.max.memory",
    "enforced.power.limit": "enforced.power.limit", "temperature.gpu": "temperature.gpu",
    "persistence-mode": "persistence_mode", "memory.reserved": "memory.used",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
    "clocks_throttle_reasons.sw_power_cap": "clocks_event_reasons.sw_power_cap",
}


def canonical(field: str) -> str:
    name = field.strip().lower()
    name = ALIASES.get(name, name)
    if name not in FIELDS:
        raise SmiExit(2, f'Field "{field.strip()}" is not a valid field to query.\n\n')
    return name


def query_lines(view: View, fields: list[str], units: bool, now: float) -> list[str]:
    loads = telemetry.read_loads(view.load_root, now)
    caps = powercap.read(view.load_root)
    rows = []
    for i, gpu in enumerate(view.gpus):
        if view.lost(view.profile.gpus.index(gpu)):
            sys.stderr.write(health.LOST.format(bus=gpu.bus_id[4:]))
            continue
        smp = telemetry.sample(view.profile, gpu, loads.get(gpu.minor), now, powercap.limit_of(caps, view.profile, gpu))
        cells = []
        for f in fields:
            unit, get = FIELDS[f]
            value = get(gpu, i, smp, view, now)
            cells.append(f"{value} {unit}" if units and unit and not value.startswith("[") else value)
        rows.append(", ".join(cells))
    return rows


def query_header(fields: list[str], units: bool) -> str:
    return ", ".join(f"{f} [{FIELDS[f][0]}]" if units and FIELDS[f][0] else f for f in fields)


# ---------------------------------------------------------------------------------------------- dmon

DMON_GROUPS: list[tuple[str, list[tuple[str, str]]]] = [
    ("p", [("pwr", "W"), ("gtemp", "C"), ("mtemp", "C")]),
    ("u", [("sm", "%"), ("mem", "%"), ("enc", "%"), ("dec", "%"), ("jpg", "%"), ("ofa", "%")]),
    ("c", [("mclk", "MHz"), ("pclk", "MHz")]),
    ("v", [("pviol", "%"), ("tviol", "bool")]),
    ("m", [("fb", "MB"), ("bar1", "MB"), ("ccpm", "MB")]),
    ("e", [("sbecc", "errs"), ("dbecc", "errs"), ("pci", "errs")]),
    ("t", [("rxpci", "MB/s"), ("txpci", "MB/s")]),
]


def _dmon_values(smp: telemetry.Sample) -> dict[str, str]:
    busy = smp.util_gpu > 0
    return {
        "pwr": str(round(smp.power_w)), "gtemp": str(smp.temp_c),
        "mtemp": "-" if smp.mem_temp_c is None else str(smp.mem_temp_c),
        "sm": str(smp.util_gpu), "mem": str(smp.util_mem), "enc": "0", "dec": "0", "jpg": "0", "ofa": "0",
        "mclk": str(smp.mem_mhz), "pclk": str(smp.sm_mhz), "pviol": str(smp.pviol), "tviol": "0",
        "fb": str(smp.mem_used_mib), "bar1": str(smp.mem_used_mib + 1 if busy or smp.mem_used_mib else 1),
        "ccpm": "0", "sbecc": "0", "dbecc": "0", "pci": "0",
        "rxpci": str(smp.rx_mb_s), "txpci": str(smp.tx_mb_s),
    }


def dmon(view: View, out: TextIO, selectors: str, delay_s: float, count: int | None, opts: str,
         ids: list[int] | None) -> None:
    import datetime as dt

    cols = [c for key, group in DMON_GROUPS if key in selectors for c in group]
    with_date, with_time = "D" in opts.upper(), "T" in opts.upper()
    # Header and row layout as the real driver prints them (captured with -o DT and -o T).
    if with_date and with_time:
        head1, head2 = "#Date        Time         gpu", "#YYYYMMDD    HH:MM:SS     Idx"
        stamp_fmt = " %Y%m%d    %H:%M:%S"
    elif with_date:
        head1, head2, stamp_fmt = "#Date         gpu", "#YYYYMMDD     Idx", " %Y%m%d"
    elif with_time:
        head1, head2, stamp_fmt = "#Time         gpu", "#HH:MM:SS     Idx", " %H:%M:%S"
    else:
        head1, head2, stamp_fmt = "# gpu", "# Idx", ""
    h1 = head1 + "".join(f" {n:>6}" for n, _ in cols) + " "
    h2 = head2 + "".join(f" {u:>6}" for _, u in cols) + " "
    out.write(h1 + "\n" + h2 + "\n")
    out.flush()
    n = 0
    while count is None or n < count:
        now = time.time()
        loads = telemetry.read_loads(view.load_root, now)
        caps = powercap.read(view.load_root)
        stamp = dt.datetime.fromtimestamp(now)
        for i, gpu in enumerate(view.gpus):
            if ids is not None and i not in ids:
                continue
            vals = _dmon_values(telemetry.sample(view.profile, gpu, loads.get(gpu.minor), now,
                                                 powercap.limit_of(caps, view.profile, gpu)))
            lead = stamp.strftime(stamp_fmt) if stamp_fmt else ""
            idx = f"{i:>8}" if stamp_fmt else f"{i:>5}"
            out.write(lead + idx + "".join(f" {vals[c]:>6}" for c, _ in cols) + " \n")
        out.flush()
        n += 1
        if count is None or n < count:
            time.sleep(delay_s)


# ---------------------------------------------------------------------------------------------- table

def table(view: View, now: float) -> str:
    p = view.profile
    cuda = p.cuda_version
    loads = telemetry.read_loads(view.load_root, now)
    caps = powercap.read(view.load_root)
    sep = "+-----------------------------------------+------------------------+----------------------+"
    lines = [
        time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)) + "       ",
        "+" + "-" * 89 + "+",
        f"| NVIDIA-SMI {view.driver_version:<23}Driver Version: {view.driver_version:<15}CUDA Version: {cuda:<9}|",
        sep,
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    ]
    for i, g in enumerate(view.gpus):
        s = telemetry.sample(p, g, loads.get(g.minor), now, powercap.limit_of(caps, p, g))
        name = g.name if len(g.name) <= 29 else g.name[:26] + "..."
        lines.append(f"|{i:>4}  {name:<29}{'On':>4}  |{g.bus_id:>19} Off |{'0':>21} |")
        lines.append(
            f"| N/A{s.temp_c:>5}C{s.pstate:>6}{round(s.power_w):>15}W / {round(s.limit_w):>4}W "
            f"|{s.mem_used_mib:>8}MiB / {g.mem_total_mib:>6}MiB |{s.util_gpu:>7}%{'Default':>13} |"
        )
        lines.append(f"|{'':41}|{'':24}|{'Disabled':>21} |")
        lines.append(sep)
    lines += [
        "",
        "+" + "-" * 89 + "+",
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found" + " " * 61 + "|",
        "+" + "-" * 89 + "+",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- CLI

def _quiet_signals() -> None:
    """Loops end on SIGTERM/SIGINT/SIGPIPE without a traceback, like the real tool."""
    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)

    def _bye(signum: int, frame: object) -> None:
        raise SystemExit(0)

    _signal.signal(_signal.SIGTERM, _bye)
    _signal.signal(_signal.SIGINT, _bye)


def _opt(args: list[str], i: int, name: str) -> tuple[str, int]:
    """Value of `--name=v` or `--name v` / `-x v` at args[i]; returns (value, next index)."""
    a = args[i]
    if "=" in a:
        return a.split("=", 1)[1], i + 1
    if i + 1 >= len(args):
        raise SmiExit(2, f'Option "{name}" requires an argument.\n', stderr=True)
    return args[i + 1], i + 2


def _ids(spec: str, view: View) -> list[int]:
    out = []
    for part in spec.split(","):
        part = part.strip()
        for i, g in enumerate(view.gpus):
            if part in (str(i), g.uuid, g.bus_id, g.bus_id[4:]):
                out.append(i)
                break
        else:
            raise SmiExit(6, "No devices were found\n")
    return out


def run(argv: list[str], ctx: SimContext, out: TextIO) -> int:
    view = resolve_view(ctx)
    if argv[:1] == ["topo"]:
        return _topo(argv[1:], view, out)
    if argv[:1] == ["dmon"]:
        return _dmon(argv[1:], view, out)
    if argv[:1] == ["nvlink"]:
        cap = view.profile.capture("nvlink-s.txt")
        out.write(_read_text(cap) if cap and view.profile.name.startswith("h200") else "")
        return 0
    query: list[str] | None = None
    fmt: str | None = None
    loop_s: float | None = None
    ids: list[int] | None = None
    target: str | None = None
    power: str | None = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-L", "--list-gpus"):
            for n, g in enumerate(view.gpus):
                out.write(f"GPU {n}: {g.name} (UUID: {g.uuid})\n")
            return 0
        if a in ("--version", "-v"):
            v = view.driver_version
            out.write(f"NVIDIA-SMI version  : {v}\nNVML version        : {'.'.join(v.split('.')[:2])}\n"
                      f"DRIVER version      : {v}\nCUDA Version        : {view.profile.cuda_version}\n")
            return 0
        if a in ("-q", "--query") and any(x in ("-d", "--display") or x.startswith("--display=") for x in argv):
            return _health_q(view, out)
        if a in ("-q", "--query"):
            return _full_q(view, out)
        if a.startswith("--query-gpu"):
            spec, i = _opt(argv, i, "--query-gpu")
            query = [canonical(f) for f in spec.split(",") if f.strip()]
            continue
        if a.startswith("--format"):
            fmt, i = _opt(argv, i, "--format")
            continue
        if a in ("-i", "--id") or a.startswith("--id="):
            spec, i = _opt(argv, i, "--id")
            ids = _ids(spec, view)
            continue
        if a in ("-l", "--loop") or a.startswith("--loop="):
            v, i = _opt(argv, i, "--loop")
            loop_s = float(v)
            continue
        if a in ("-lms", "--loop-ms") or a.startswith("--loop-ms="):
            v, i = _opt(argv, i, "--loop-ms")
            loop_s = float(v) / 1000.0
            continue
        if a in ("-f", "--filename") or a.startswith("--filename="):
            target, i = _opt(argv, i, "--filename")
            continue
        if a in ("-pl", "--power-limit") or a.startswith("--power-limit="):
            power, i = _opt(argv, i, "--power-limit")
            continue
        raise SmiExit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
    if power is not None:
        return _set_power(ctx, view, power, ids, out)
    if target:
        out = open(target, "a")  # noqa: SIM115 - lives until the process ends
    if query is None:
        out.write(table(view, time.time()))
        return 0
    if not fmt or not fmt.split(",")[0].strip().lower() == "csv":
        raise SmiExit(2, "CSV format must be specified with --format when querying GPUs.\n")
    flags = {f.strip().lower() for f in fmt.split(",")}
    units = "nounits" not in flags
    if ids is not None:
        view = View(view.profile, view.driver_version, [view.gpus[n] for n in ids], view.load_root)
    if "noheader" not in flags:
        out.write(query_header(query, units) + "\n")
    while True:
        for line in query_lines(view, query, units, time.time()):
            out.write(line + "\n")
        out.flush()
        if loop_s is None:
            return 0
        time.sleep(max(loop_s, 0.01))


def _set_power(ctx: SimContext, view: View, value: str, ids: list[int] | None, out: TextIO) -> int:
    """`[-i IDS] -pl W`: NVML's set-limit call per GPU, with the real driver's lines (hardware/power_limit.py in the
    tool quotes them): root on the host only (a container, like an unprivileged user, lacks the permission), each
    GPU's range checked before any is set; the limit lasts until the driver reloads (powercap.py)."""
    try:
        watts = float(value)
    except ValueError:
        raise SmiExit(2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n") from None
    targets = view.gpus if ids is None else [view.gpus[n] for n in ids]
    if ctx.vmid is not None or os.geteuid() != 0:
        raise SmiExit(4, f"Failed to set power management limit for GPU {targets[0].bus_id}: Insufficient "
                      "Permissions\nTerminating early due to previous errors.\n")
    low, high = view.profile.power_min_w, view.profile.power_limit_w
    for g in targets:
        if not low <= watts <= high:
            raise SmiExit(2, f"Provided power limit {watts:.2f} W is not a valid power limit which should be between "
                          f"{low:.2f} W and {high:.2f} W for GPU {g.bus_id}\nTerminating early due to previous "
                          "errors.\n")
    caps = powercap.read(ctx.host_dir)
    powercap.write(ctx.host_dir, view.profile, {g.minor: watts for g in targets})
    for g in targets:
        out.write(f"Power limit for GPU {g.bus_id} was set to {watts:.2f} W from "
                  f"{powercap.limit_of(caps, view.profile, g):.2f} W.\n")
    out.write("All done.\n")
    return 0


def _q_report(view: View, out: TextIO, block: Callable[[Gpu, int], str]) -> int:
    """A `-q` report: the real header, then each visible GPU's block; a lost GPU's real error line instead of its
    block (stderr), and NVML's GPU_IS_LOST exit (15)."""
    import datetime as dt

    stamp = dt.datetime.now().strftime("%a %b %d %H:%M:%S %Y").replace(" 0", "  ")
    out.write(f"\n==============NVSMI LOG==============\n\n{'Timestamp':<55}: {stamp}\n"
              f"{'Driver Version':<55}: {view.driver_version}\n{'CUDA Version':<55}: {view.profile.cuda_version}\n\n"
              f"{'Attached GPUs':<55}: {len(view.gpus)}\n")
    lost = False
    for gpu in view.gpus:
        index = view.profile.gpus.index(gpu)
        if view.lost(index):
            sys.stderr.write(health.LOST.format(bus=gpu.bus_id[4:]))
            lost = True
            continue
        out.write(block(gpu, index) + "\n")
    return 15 if lost else 0


def _health_q(view: View, out: TextIO) -> int:
    """`-q -d ECC,ROW_REMAPPER,PERFORMANCE` (any -d): the health sections of the real H200 capture, per GPU, after
    the knobs."""
    template = _read_text(os.path.join(os.path.dirname(__file__), "captures", "h200-x2", "q-health-sections.txt"))
    return _q_report(view, out, lambda gpu, index: health.health_sections(template, gpu.bus_id, index, view.faults))


def _gpu_blocks(text: str) -> dict[str, list[str]]:
    """A `-q` capture's per-GPU blocks by bus id (the lines after each `GPU <bus>` head)."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for ln in text.splitlines():
        if ln.startswith("GPU ") and ln.count(":") == 2:
            current = blocks.setdefault(ln[4:].strip(), [])
        elif current is not None:
            current.append(ln)
    return blocks


def _full_q(view: View, out: TextIO) -> int:
    """`-q`: each visible GPU's block of the profile's real capture (the H200's block under its bus id where the
    profile has none), with the hardware knobs applied."""
    cap = view.profile.capture("q.txt")
    blocks = _gpu_blocks(_read_text(cap)) if cap is not None else {}
    spare = next(iter(_gpu_blocks(_read_text(os.path.join(os.path.dirname(__file__), "captures", "h200-x2",
                                                           "q.txt"))).values()))

    def block(gpu: Gpu, index: int) -> str:
        body = [ln for ln in blocks.get(gpu.bus_id, spare) if ln.strip()]
        return f"GPU {gpu.bus_id}\n" + health.apply_knobs(body, index, view.faults)

    return _q_report(view, out, block)


def _topo(args: list[str], view: View, out: TextIO) -> int:
    keep = [view.profile.gpus.index(g) for g in view.gpus]
    if args[:1] in (["-m"], ["--matrix"]):
        out.write(topo_m(view.profile, keep))
        return 0
    if args[:1] == ["-p2p"] and len(args) > 1 and args[1] in ("r", "w", "n", "a", "p"):
        out.write(topo_p2p(view.profile, args[1], keep))
        return 0
    raise SmiExit(2, "Invalid combination of input arguments. Please run 'nvidia-smi topo -h' for help.\n\n")


def _dmon(args: list[str], view: View, out: TextIO) -> int:
    selectors, delay, count, opts, ids = "puc", 1.0, None, "", None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-s":
            selectors, i = _opt(args, i, "-s")
        elif a == "-d":
            v, i = _opt(args, i, "-d")
            delay = float(v)
        elif a == "-c":
            v, i = _opt(args, i, "-c")
            count = int(v)
        elif a == "-o":
            opts, i = _opt(args, i, "-o")
        elif a == "-i":
            v, i = _opt(args, i, "-i")
            ids = _ids(v, view)
        else:
            raise SmiExit(2, "Invalid combination of input arguments. Please run 'nvidia-smi dmon -h' for help.\n\n")
    dmon(view, out, selectors, delay, count, opts, ids)
    return 0


def main(argv: list[str] | None = None, ct_root: str | os.PathLike[str] | None = None) -> int:
    """Entry point; `ct_root` is set by the stub the .run stand-in installs in a container."""
    _quiet_signals()
    args = sys.argv[1:] if argv is None else argv
    try:
        ctx = context_from_env() if ct_root is None else context_from_ctside(ct_root)
        return run(args, ctx, sys.stdout)
    except SmiExit as e:
        (sys.stderr if e.stderr else sys.stdout).write(e.text)
        return e.code
    except BrokenPipeError:
        os._exit(0)
    except KeyError as e:  # unknown profile in host.json
        sys.stderr.write(f"nvidia-smi (sim): {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
