"""NVIDIA driver version and nvidia-smi failure states.

Why: the container's NVIDIA userspace must equal the host kernel module version exactly; a mismatch shows up
only as `Failed to initialize NVML: Driver/library version mismatch`. The kernel module version is read from
`/proc/driver/nvidia/version` (visible in the host and in the container), the userspace one from nvidia-smi.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from orchestrator.parsers import ParseError, strip_ansi

__all__ = [
    "DriverMismatch",
    "DriverVersion",
    "NvidiaSmiState",
    "NvidiaSmiStatus",
    "detect_driver_mismatch",
    "nvidia_smi_status",
    "parse_driver_version",
    "versions_match",
]

_VERSION = r"\d{3,}\.\d+(?:\.\d+)?"
_NVRM_RE = re.compile(rf"^NVRM version:\s*(?P<desc>.*?)\s+(?P<ver>{_VERSION})\b", re.MULTILINE)
_LABELLED_RE = re.compile(rf"^\s*(?:DRIVER version|Driver Version)\s*:?\s*(?P<ver>{_VERSION})\b", re.MULTILINE)
_BANNER_RE = re.compile(rf"Driver Version:\s*(?P<ver>{_VERSION})")
_BARE_RE = re.compile(rf"^{_VERSION}$")
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(?P<ver>\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class DriverVersion:
    """A driver version such as `580.159.04`; `flavor` is known only from /proc/driver/nvidia/version."""

    version: str
    flavor: Literal["open", "proprietary"] | None = None
    source: Literal["proc", "nvidia-smi"] = "proc"

    @property
    def parts(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split("."))

    @property
    def major(self) -> int:
        return self.parts[0]

    def __str__(self) -> str:
        return self.version


def parse_driver_version(text: str) -> DriverVersion:
    """Parse `/proc/driver/nvidia/version`, `nvidia-smi --query-gpu=driver_version` (with or without the csv
    header, one line per GPU), `nvidia-smi --version` or the nvidia-smi banner.

    Per-GPU lines must all agree (one kernel module serves every GPU); anything else raises ParseError.
    """
    clean = strip_ansi(text).replace("\r", "")
    m = _NVRM_RE.search(clean)
    if m:
        flavor: Literal["open", "proprietary"] = "open" if "Open Kernel Module" in m.group("desc") else "proprietary"
        return DriverVersion(m.group("ver"), flavor=flavor, source="proc")
    m = _LABELLED_RE.search(clean) or _BANNER_RE.search(clean)
    if m:
        return DriverVersion(m.group("ver"), source="nvidia-smi")
    values = [ln.strip() for ln in clean.splitlines() if ln.strip() and ln.strip() != "driver_version"]
    if values and all(_BARE_RE.match(v) for v in values):
        if len(set(values)) != 1:
            raise ParseError(f"GPUs report different driver versions: {sorted(set(values))}", text)
        return DriverVersion(values[0], source="nvidia-smi")
    raise ParseError("no NVIDIA driver version found", text)


def versions_match(kernel: str, userspace: str) -> bool:
    """True when the userspace version equals the kernel module's, allowing a shorter userspace string.

    NVML reports `580.159` where the module says `580.159.04`; compare component-wise on the common prefix
    but require at least major.minor.
    """
    k, u = kernel.split("."), userspace.split(".")
    n = min(len(k), len(u))
    return n >= 2 and k[:n] == u[:n]


NvidiaSmiState = Literal["ok", "version_mismatch", "driver_not_loaded", "no_devices", "error"]


@dataclass(frozen=True)
class NvidiaSmiStatus:
    """What a run of nvidia-smi says about the driver, from its output and exit code."""

    state: NvidiaSmiState
    message: str = ""
    library_version: str | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def nvidia_smi_status(text: str, rc: int = 0) -> NvidiaSmiStatus:
    """Classify nvidia-smi output: the known failure strings first, then the exit code."""
    clean = strip_ansi(text)
    first = next((ln.strip() for ln in clean.splitlines() if ln.strip()), "")
    if "Driver/library version mismatch" in clean:
        m = _NVML_LIB_RE.search(clean)
        return NvidiaSmiStatus("version_mismatch", first, m.group("ver") if m else None)
    if "couldn't communicate with the NVIDIA driver" in clean or "NVIDIA driver is not loaded" in clean:
        return NvidiaSmiStatus("driver_not_loaded", first)
    if "No devices were found" in clean:
        return NvidiaSmiStatus("no_devices", first)
    if rc != 0 or "Failed to initialize NVML" in clean:
        return NvidiaSmiStatus("error", first)
    return NvidiaSmiStatus("ok")


@dataclass(frozen=True)
class DriverMismatch:
    """Kernel module and userspace (NVML) versions that differ, e.g. after a host driver upgrade."""

    kernel_version: str | None
    library_version: str | None

    def describe(self) -> str:
        return (
            f"NVIDIA driver/library version mismatch: kernel module {self.kernel_version or 'unknown'}, "
            f"userspace NVML {self.library_version or 'unknown'}"
        )


def detect_driver_mismatch(
    nvidia_smi_output: str, kernel: DriverVersion | str | None = None
) -> DriverMismatch | None:
    """A DriverMismatch when nvidia-smi reported one (or its NVML version differs from `kernel`), else None."""
    kernel_version = str(kernel) if kernel is not None else None
    status = nvidia_smi_status(nvidia_smi_output)
    if status.state == "version_mismatch":
        return DriverMismatch(kernel_version, status.library_version)
    m = _NVML_LIB_RE.search(nvidia_smi_output) or re.search(
        r"^NVML version\s*:\s*(\d+\.\d+(?:\.\d+)?)", nvidia_smi_output, re.MULTILINE
    )
    if m and kernel_version and not versions_match(kernel_version, m.group(1)):
        return DriverMismatch(kernel_version, m.group(1))
    return None


def loaded_driver_version(proc_text: str | None) -> str | None:
    """The loaded kernel module's version from `/proc/driver/nvidia/version` (None or empty: not loaded; text
    that is not the driver's: None too). The one reading of HOST.driver_version, for `up` and for the doctor."""
    if not proc_text:
        return None
    try:
        return parse_driver_version(proc_text).version
    except ParseError:
        return None
