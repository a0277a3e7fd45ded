"""GPU hardware faults of the simulated host, in the real formats (docs/simulator.md, "GPU hardware faults").

The knobs (simulator.config.HostFaults) are per GPU index, "GPU:VALUE[,GPU:VALUE]":
- `xid`: "CODE@GPU[,…]": real NVRM Xid lines written into the host's kernel log at once (journalctl -k shows them);
  79 also makes the GPU fall off the bus (`gpu_lost`).
- `gpu_lost`: that GPU fell off the bus: nvidia-smi prints the real "Unable to determine the device handle … GPU is
  lost" line for it (stderr) instead of its data.
- `ecc`: "GPU:UNCORRECTED[:CORRECTED]": the volatile DRAM ECC counters of `nvidia-smi -q`.
- `remap`: "GPU:pending" or "GPU:failed": the Remapped Rows section.
- `clocks_event`: "GPU:REASON" (hw_slowdown, hw_thermal, hw_power_brake, sw_thermal): Clocks Event Reasons Active.
- `link`: "GPU:idle-downshift" (Gen1 when idle, its maximum under load: what RTX PRO 6000 links do anyway) or
  "GPU:stuck-gen2" (Gen2 whatever the load: local-inference-lab/rtx6kpro#88).
- `recovery`: "GPU:ACTION" (reset, reboot, drain_p2p, drain_reset): the driver's GPU recovery action (R565+): the
  real Xid 154 line `GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)` in the kernel log,
  and `GPU Recovery Action : Reboot` in the full `nvidia-smi -q`.
A host reboot (`deploy sim reboot`) starts a new kernel log, brings a lost GPU back, applies pending remaps and
clears the recovery action.
Stdlib only, no `re`: nvidia-smi imports it (smi.py's cost note).
"""

from __future__ import annotations

import os
import time

KERNEL_LOG = "kernel.log"  # in the host's directory: "EPOCH\tTEXT" per line, the current boot only
LOST = ("Unable to determine the device handle for GPU {bus}: GPU is lost.  Reboot the system to recover this "
        "GPU\n")
#: The driver's text after `pid=…, name=…,` for the Xids a knob writes (real texts; others get a generic one).
XID_TEXT = {
    8: "Channel 00000010",
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_00000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
        "subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Remapping failed: no spare row is available.",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
         "sequence number 1234.",
}
REASON_LINES = {"hw_slowdown": "HW Slowdown", "hw_thermal": "HW Thermal Slowdown",
                "hw_power_brake": "HW Power Brake Slowdown", "sw_thermal": "SW Thermal Slowdown"}
LINK_MODES = ("idle-downshift", "stuck-gen2")
#: knob value -> (the driver's code, its Xid 154 label, what `nvidia-smi -q` prints as GPU Recovery Action); the
#: labels of NVRM's line and NVML's nvmlGpuRecoveryAction_t order (NONE 0, GPU_RESET 1, NODE_REBOOT 2, DRAIN_P2P 3,
#: DRAIN_AND_RESET 4).
RECOVERY = {"reset": (1, "GPU Reset Required", "Reset"), "reboot": (2, "Node Reboot Required", "Reboot"),
            "drain_p2p": (3, "Drain P2P", "Drain P2P"), "drain_reset": (4, "Drain and Reset", "Drain and Reset")}


def per_gpu(spec: str | None) -> dict[int, str]:
    """"3:failed,5:pending" -> {3: "failed", 5: "pending"}; "" or None -> {}."""
    out: dict[int, str] = {}
    for part in (spec or "").split(","):
        gpu, sep, value = part.strip().partition(":")
        if sep and gpu.strip().isdigit():
            out[int(gpu)] = value.strip()
    return out


def check_knobs(faults: dict[str, object], gpu_count: int) -> None:
    """Refuse a malformed knob before anything is written (ValueError names it and its format)."""
    def gpu_ok(g: str) -> bool:
        return g.strip().isdigit() and int(g) < gpu_count

    for name, fmt, ok in (
        ("ecc", "GPU:UNCORRECTED[:CORRECTED]", lambda v: all(x.isdigit() for x in v.split(":"))),
        ("remap", "GPU:pending|failed", lambda v: v in ("pending", "failed")),
        ("clocks_event", f"GPU:{'|'.join(REASON_LINES)}", lambda v: v in REASON_LINES),
        ("link", f"GPU:{'|'.join(LINK_MODES)}", lambda v: v in LINK_MODES),
        ("recovery", f"GPU:{'|'.join(RECOVERY)}", lambda v: v in RECOVERY),
    ):
        spec = faults.get(name)
        for part in str(spec or "").split(",") if spec else ():
            gpu, sep, value = part.strip().partition(":")
            if not sep or not gpu_ok(gpu) or not ok(value.strip()):
                raise ValueError(f"fault {name}={spec!r}: each item must be {fmt} with GPU 0..{gpu_count - 1}")
    xid = faults.get("xid")
    for part in str(xid or "").split(",") if xid else ():
        code, sep, gpu = part.strip().partition("@")
        if not sep or not code.isdigit() or not gpu_ok(gpu):
            raise ValueError(f"fault xid={xid!r}: each item must be CODE@GPU with GPU 0..{gpu_count - 1}")
    lost = faults.get("gpu_lost")
    if lost is not None and not (isinstance(lost, int) and 0 <= lost < gpu_count):
        raise ValueError(f"fault gpu_lost={lost!r}: a GPU index 0..{gpu_count - 1}")


def pci_of(bus_id: str) -> str:
    """nvidia-smi's `00000000:75:00.0` -> the kernel's `0000:75:00`."""
    dom, bus, devfn = bus_id.split(":")
    return f"{dom[-4:]}:{bus}:{devfn.split('.')[0]}".lower()


def xid_line(code: int, bus_id: str, pid: int = 4242) -> str:
    """The driver's line as the kernel logs it (79 and GSP faults come from no process)."""
    who = "pid='<unknown>', name=<unknown>" if code in (79, 119, 64) else f"pid={pid}, name=python3"
    text = XID_TEXT.get(code, f"Xid {code} reported by the simulated driver")
    return f"NVRM: Xid (PCI:{pci_of(bus_id)}): {code}, {who}, {text}"


def recovery_line(action: str, bus_id: str) -> str:
    """The driver's Xid 154 line for a recovery action knob (from None: the first verdict of this boot)."""
    code, label, _ = RECOVERY[action]
    return f"NVRM: Xid (PCI:{pci_of(bus_id)}): 154, GPU recovery action changed from 0x0 (None) to 0x{code:x} ({label})"


def append_kernel(host_dir: str, lines: list[str], now: float | None = None) -> None:
    stamp = time.time() if now is None else now
    with open(os.path.join(host_dir, KERNEL_LOG), "a") as f:
        for line in lines:
            f.write(f"{stamp:.6f}\t{line}\n")


def read_kernel(host_dir: str) -> list[tuple[float, str]]:
    try:
        with open(os.path.join(host_dir, KERNEL_LOG)) as f:
            rows = [ln.rstrip("\n").split("\t", 1) for ln in f]
    except FileNotFoundError:
        return []
    return [(float(r[0]), r[1]) for r in rows if len(r) == 2]


def link_gen(faults: dict[str, object], index: int, gen: int, max_gen: int, busy: bool) -> int:
    """The link generation nvidia-smi reports now, after the `link` knob."""
    mode = per_gpu(str(faults.get("link") or "")).get(index)
    if mode == "stuck-gen2":
        return 2
    if mode == "idle-downshift":
        return max_gen if busy else 1
    return gen


def health_sections(template: str, bus_id: str, index: int, faults: dict[str, object]) -> str:
    """One GPU's `-q -d ECC,ROW_REMAPPER,PERFORMANCE` block: the real H200 capture's sections, knobs applied."""
    lines = template.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("    Performance State"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("    Temperature"))
    return f"GPU {bus_id}\n" + apply_knobs(lines[start:end], index, faults)


def apply_knobs(body: list[str], index: int, faults: dict[str, object]) -> str:
    """A GPU block's lines (without its `GPU <bus>` head) with the knobs applied, as nvidia-smi -q prints them."""
    recovery = RECOVERY.get(per_gpu(str(faults.get("recovery") or "")).get(index) or "")
    ecc = per_gpu(str(faults.get("ecc") or "")).get(index)
    remap = per_gpu(str(faults.get("remap") or "")).get(index)
    reason = REASON_LINES.get(per_gpu(str(faults.get("clocks_event") or "")).get(index) or "")
    out, top, section = [], "", ""
    for ln in body:
        key, sep, value = ln.partition(":")
        name, depth = key.strip(), len(ln) - len(ln.lstrip(" "))
        if not sep or not value.strip():
            if depth == 4:
                top = section = name
            elif depth == 8:
                section = f"{top}/{name}"
        elif ecc and section == "ECC Errors/Volatile" and name in ("DRAM Uncorrectable", "DRAM Correctable"):
            counts = ecc.split(":")
            n = counts[0] if name == "DRAM Uncorrectable" else (counts[1] if len(counts) > 1 else "0")
            ln = f"{key}: {n}"
        elif remap and top == "Remapped Rows" and depth == 8:
            flag = {"pending": "Pending", "failed": "Remapping Failure Occurred"}.get(remap)
            if name == flag:
                ln = f"{key}: Yes"
            elif name == "Uncorrectable Error":
                ln = f"{key}: 1"
        elif reason and name == reason:
            ln = f"{key}: Active"
        elif reason and name == "Idle" and top == "Clocks Event Reasons":
            ln = f"{key}: Not Active"
        elif recovery and depth == 4 and name == "GPU Recovery Action":
            ln = f"{key}: {recovery[2]}"
        out.append(ln)
    return "\n".join(out) + "\n"
