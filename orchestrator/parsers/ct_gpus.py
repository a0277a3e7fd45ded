"""The container's one GPU question: which GPUs it sees and its NVML userspace version, from ONE nvidia-smi.

Why one: `nvidia-smi -L` and `--query-gpu=driver_version` each start nvidia-smi (and NVML) in the container; both
answers come from one `--query-gpu` with the list's columns plus `driver_version`. The columns are the first five
of the real captures (`tests/fixtures/nvidia-smi/h200x2-*/query-gpu.csv`), and the header is kept so the parser
reads the columns by name. A failing nvidia-smi prints its message instead of CSV: it is classified as before
(version mismatch, driver not loaded, no devices, other error), the exit code 127 meaning nvidia-smi is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.parsers import strip_ansi
from orchestrator.parsers.devices import GpuListEntry
from orchestrator.parsers.driver import NvidiaSmiStatus, nvidia_smi_status
from orchestrator.parsers.gpu_query import parse_header

CT_GPU_FIELDS = ("index", "uuid", "name", "pci.bus_id", "driver_version")
CT_GPU_QUERY = f"nvidia-smi --query-gpu={','.join(CT_GPU_FIELDS)} --format=csv"


@dataclass(frozen=True)
class CtGpus:
    """What the container's nvidia-smi answered."""

    rc: int
    status: NvidiaSmiStatus
    gpus: tuple[GpuListEntry, ...] = ()
    #: The userspace (NVML) version: the one every GPU row names; None when unknown or the rows disagree.
    driver_version: str | None = None

    @property
    def missing(self) -> bool:
        """nvidia-smi is not installed in the container (the shell's 127)."""
        return self.rc == 127


def parse_ct_gpus(stdout: str, stderr: str, rc: int) -> CtGpus:
    """`CT_GPU_QUERY`'s output and exit code → the GPUs and the driver version (pure)."""
    status = nvidia_smi_status(stdout + stderr, rc)
    if rc == 127 or not status.ok:
        return CtGpus(rc, status)
    lines = [ln for ln in strip_ansi(stdout).replace("\r", "").splitlines() if ln.strip()]
    names = [n for n, _ in parse_header(lines[0])] if lines else []
    if not {"index", "name", "uuid", "driver_version"} <= set(names):
        first = lines[0].strip() if lines else "no output"
        return CtGpus(rc, NvidiaSmiStatus("error", f"not the --query-gpu answer: {first[:200]}"))
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(names) or not cells[names.index("index")].isdigit():
            return CtGpus(rc, NvidiaSmiStatus("error", f"not a --query-gpu row: {line.strip()[:200]}"))
        rows.append(dict(zip(names, cells, strict=True)))
    gpus = tuple(GpuListEntry(int(r["index"]), r["name"], r["uuid"]) for r in rows)
    # Kept as text: a two-part version (580.65) must not become a number.
    versions = {r["driver_version"] for r in rows}
    return CtGpus(rc, status, gpus, versions.pop() if len(versions) == 1 else None)
