"""Known fatal lines in an SGLang server log: seeing one ends a health wait at once, quoting the line.

Each verdict has a stable code, what it means and a fix an operator can act on. The texts are the ones real
servers print (tests/fixtures/sglang/fatal/ keeps each with its upstream source). One verdict is an absence,
not a line: `capture-stuck`, a capture begin line with no end after it (`CapturePhase`; 0.5.12.post1's
`Capture cuda graph begin`, 0.5.23's `Capture target decode CUDA graph begin`, orchestrator/parsers/sglang_lines.py).
Xid lines come from the NVIDIA kernel driver: they are in the PVE host's kernel log (`journalctl -k`),
not in the container's journal, but are classified the same wherever they are read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.hardware.catalog import load_catalog
from orchestrator.parsers.sglang_lines import (
    DECODE_CAPTURE_BEGIN,
    DECODE_CAPTURE_END,
    PREFILL_CAPTURE_BEGIN,
    PREFILL_CAPTURE_END,
    prefill_capture_switch,
)


@dataclass(frozen=True)
class FatalPattern:
    code: str
    pattern: re.Pattern[str]
    meaning: str
    fix: str
    detail: Callable[[re.Match[str]], str] | None = None  # more meaning read from the matched line itself


def _xid_detail(m: re.Match[str]) -> str:
    """The Xid's meaning from the package's catalog (orchestrator/hardware/xid.yaml), which also gives its action."""
    rule = load_catalog().rule(int(m.group("xid")))
    return f"Xid {rule.code} on GPU {m.group('pci')}: {rule.meaning}"


NAN = FatalPattern(
    "nan", re.compile(r"probability tensor contains either .inf., .nan.|\bnan\b.*(detected|logits)", re.IGNORECASE),
    "the sampler saw NaN/inf probabilities (FP4 GEMM race or a backend bug on this GPU)",
    "try --fp4-gemm-backend flashinfer_cudnn, wipe the JIT cache, or roll back")
UNSUPPORTED_ARCH = FatalPattern(
    "unsupported-arch",
    re.compile(r"Unsupported architecture|no kernel image is available for execution on the device"
               r"|Arch conditional MMA instruction used without targeting appropriate compute capability"),
    "a kernel (e.g. trtllm-gen NSA/DSA) has no build for this GPU architecture (SM120)",
    "pick another NSA/DSA backend (e.g. flashinfer_sparse_mla / tilelang) or a build with SM120 kernels")
CUDA_GRAPH_OOM = FatalPattern(
    "cuda-graph-oom", re.compile(r"Capture cuda graph failed:.*out of memory", re.IGNORECASE),
    "CUDA ran out of memory while capturing CUDA graphs (after the weights and KV cache were allocated)",
    "lower --cuda-graph-max-bs (256 or less on 96 GB cards) or --mem-fraction-static; --disable-cuda-graph "
    "confirms it")
CUDA_OOM = FatalPattern(
    "cuda-oom", re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory.*cuda graph", re.IGNORECASE),
    "CUDA ran out of memory",
    "lower --mem-fraction-static / --max-running-requests / --cuda-graph-max-bs")
ILLEGAL_MEMORY = FatalPattern(
    "illegal-memory-access", re.compile(r"an illegal memory access was encountered|cudaErrorIllegalAddress"),
    "a CUDA kernel read or wrote memory it does not own (a kernel bug for this GPU/backend, or a bad GPU)",
    "switch the attention/MoE backend or speculative settings the release changed, or roll back; "
    "CUDA_LAUNCH_BLOCKING=1 names the kernel; check the host's kernel log for Xid 13/31")
NCCL_TIMEOUT = FatalPattern(
    "nccl-timeout", re.compile(r"Watchdog caught collective operation timeout"),
    "an NCCL collective between the tensor-parallel ranks never completed (a rank hung or P2P is broken)",
    "check P2P (deploy verify-p2p), try --disable-custom-all-reduce or NCCL_P2P_DISABLE=1 to confirm, and read the "
    "host's kernel log for Xids")
GPU_XID = FatalPattern(
    "gpu-xid", re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)"),
    "the NVIDIA kernel driver reported a GPU error (Xid)",
    "read the host's kernel log (journalctl -k -g 'NVRM: Xid'); 79 or repeated ECC Xids: reseat or replace the GPU "
    "(power, PCIe riser); others: restart the server, and report kernel Xids (13/31/43) with the release's flags",
    detail=_xid_detail)
NO_CUDA_ARCH = FatalPattern(
    "no-cuda-arch", re.compile(r"No supported CUDA architectures found"),
    "a fused kernel was built for other GPU generations",
    "drop the fusion flag (e.g. --enable-flashinfer-allreduce-fusion) for this GPU")

CUBIN_FETCH = FatalPattern(
    "cubin-fetch",
    re.compile(r"Max retries reached\. Download failed\.|FLASHINFER_NO_DOWNLOAD is set"
               r"|AssertionError: \w+\.h not found"),
    "FlashInfer fetches its TRT-LLM-gen kernels (cubins and headers) from NVIDIA's artifact repository on their "
    "first use (FLASHINFER_CUBINS_REPOSITORY), and this server could not reach it: an air-gapped site, a proxy, "
    "or a 403 from the repository",
    "install the flashinfer-cubin (and flashinfer-jit-cache) build that matches the stack's flashinfer into the "
    "stack, or mirror the artifacts and set FLASHINFER_CUBINS_REPOSITORY to the mirror in the profile's env:; a "
    "start that finds them in FLASHINFER_CUBIN_DIR fetches nothing")

#: The toolchain the first start compiles with (docs/troubleshooting.md#the-server-cannot-compile-at-its-first-start):
#: Triton builds its CUDA driver module with the C compiler and the Python headers at the first kernel launch
#: (triton 3.6.0, runtime/build.py and backends/nvidia/driver.c); flashinfer JIT-builds its SM120 MoE and FP4
#: modules with nvcc, found through CUDA_HOME, CUDA_PATH, `which nvcc` or /usr/local/cuda (0.6.11.post1,
#: jit/cpp_ext.py).
NO_C_COMPILER = FatalPattern(
    "no-c-compiler", re.compile(r"Failed to find C compiler\. Please specify via CC environment variable"),
    "Triton found no C compiler in the container: it compiles its CUDA driver module at the first kernel launch",
    "install a C compiler in the container (`apt-get install gcc`, with `python3-dev` for the Python headers "
    "Triton's module includes), or point CC at one in the profile's env:")
NO_PYTHON_HEADERS = FatalPattern(
    "no-python-headers", re.compile(r"fatal error: Python\.h: No such file or directory"),
    "the C compiler found no Python headers: Triton's CUDA driver module includes Python.h",
    "install the headers of the container's python3 (`apt-get install python3-dev`)")
NO_NVCC = FatalPattern(
    "no-nvcc", re.compile(r"Could not find nvcc"),
    "flashinfer found no nvcc to JIT-build its kernels (it looks at CUDA_HOME, CUDA_PATH, `which nvcc`, "
    "/usr/local/cuda), and the server's stack carries none (deploy sets the unit's CUDA_HOME to a stack's own)",
    "use a stack that carries nvidia-cuda-nvcc (sglang 0.5.23 does; deploy then sets CUDA_HOME itself), or install "
    "the CUDA toolkit of the stack's CUDA in the container (/usr/local/cuda), or set CUDA_HOME in the profile's env: "
    "to one; `deploy doctor` (ct-toolchain) and `deploy plan` say what is missing")

#: torch's CUDA initialisation on a driver older than the CUDA its wheel is built for (torch 2.11.0, the
#: `TORCH_CHECK` text of c10/cuda/CUDAFunctions.cpp in the released wheel's torch/lib/libc10_cuda.so). sglang's
#: `torch.cuda.is_available()` logs it as a warning (`UserWarning: CUDA initialization: The NVIDIA driver on your
#: system is too old (found version 12080). …`, torch/cuda/__init__.py:180) and then dies of no-gpu's line; an
#: explicit CUDA init raises it (`RuntimeError: The NVIDIA driver …`). It comes first in the journal, so the start is
#: named by its cause, not by no-gpu. The found version is the CUDA version the driver runs (12080: CUDA 12.8).
DRIVER_TOO_OLD = FatalPattern(
    "driver-too-old", re.compile(r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)"),
    "the host's NVIDIA driver is older than the CUDA the stack's torch is built for (both stacks deploy knows are "
    "CUDA 13, which needs an R580 or newer driver)",
    "install an NVIDIA driver of branch 580 or newer on the host (open kernel modules) and load it; `deploy up` then "
    "puts the same userspace driver in the container; or pin an sglang whose torch is built for a CUDA this driver "
    "runs (docs/troubleshooting.md#the-host-driver-is-too-old-for-the-stacks-cuda; `deploy doctor`'s stack-cuda "
    "says it before a build)",
    detail=lambda m: f"the driver runs CUDA {_cuda_of(m.group('found'))} at most")


def _cuda_of(version: str) -> str:
    """cudaDriverGetVersion's number as CUDA's version: 12080 → 12.8."""
    n = int(version)
    return f"{n // 1000}.{n % 1000 // 10}"


#: sglang decides its device before anything else (`ServerArgs._handle_missing_default_values` → `get_device()`,
#: sglang/srt/utils/common.py of 0.5.12.post1): where torch sees no CUDA device (no NVIDIA driver userspace in the
#: container, the GPUs not passed through, a driver too old for the stack's CUDA) it raises this before any
#: model file is read. Seen as the real server's death on a machine without a GPU (tests/fixtures/sglang/fatal). The
#: exception's line, not the traceback's `raise RuntimeError("No accelerator …")` source line printed before it.
#: 0.5.23 asks its platform layer last and words it `… MUSA, MPS) or platform plugin is available.`
#: (sglang/srt/utils/common.py:1124, the raise), raised while handling the platform's own error.
NO_GPU = FatalPattern(
    "no-gpu", re.compile(r"RuntimeError: No accelerator \(CUDA, XPU, HPU, NPU(, MUSA, MPS)?\)"
                         r"( or platform plugin)? is available"),
    "the stack's torch sees no CUDA GPU in the container, so sglang found no device to run on (it raises this "
    "before reading the model)",
    "run `deploy doctor HOST`: `nvidia-smi` in the container must list the GPUs (the devN passthrough and the "
    "driver userspace of the host's driver version, which must be new enough for the stack's CUDA); then roll or "
    "`deploy up` again")

#: The server's own advice after a failed piecewise capture (sglang 0.5.12's `piecewise_cuda_graph_runner.py`).
WORKAROUND = re.compile(r"To work around this error, (?P<advice>.+?)\s*$")
PIECEWISE_CUDA_GRAPH = FatalPattern(
    "piecewise-cuda-graph",
    re.compile(r"Piecewise CUDA Graph failed with error: (?P<error>.+)"),
    "capturing the piecewise CUDA graphs (on by default since sglang 0.5.12, experimental) failed; the kernel error "
    "happened during that capture, not in serving (seen on an H100 with FA3 attention: CUBLAS_STATUS_EXECUTION_FAILED "
    "or an illegal memory access)",
    "set `disable-piecewise-cuda-graph: true` in the profile's flags (deploy roll HOST --set "
    "disable-piecewise-cuda-graph=true), as the server itself says: \"To work around this error, add "
    "--disable-piecewise-cuda-graph to your launch command.\"",
    detail=lambda m: f"the error was {m.group('error').strip()[:200]!r}")

#: In order: the first pattern a line matches names its verdict. The piecewise capture's own line comes first: its
#: error text (an illegal memory access) would otherwise name a kernel bug with the wrong fix.
FATAL_PATTERNS: tuple[FatalPattern, ...] = (PIECEWISE_CUDA_GRAPH, NAN, UNSUPPORTED_ARCH, CUDA_GRAPH_OOM, CUDA_OOM,
                                            ILLEGAL_MEMORY, NCCL_TIMEOUT, GPU_XID, NO_CUDA_ARCH, CUBIN_FETCH,
                                            NO_C_COMPILER, NO_PYTHON_HEADERS, NO_NVCC, DRIVER_TOO_OLD, NO_GPU)

CAPTURE_STUCK = FatalPattern(
    "capture-stuck", DECODE_CAPTURE_BEGIN,
    "CUDA-graph capture began and never ended (a hung collective or kernel during capture)",
    "lower --cuda-graph-max-bs, or --disable-cuda-graph to confirm (0.5.23: --cuda-graph-max-bs-decode, "
    "--cuda-graph-backend-decode=disabled); on PCIe-only GPUs check P2P (deploy verify-p2p) "
    "and try --disable-custom-all-reduce; raise start_timeout_s only if capture was still progressing")
CAPTURE_END = DECODE_CAPTURE_END
#: The prefill-side graphs (0.5.12's piecewise graphs, on by default, after the decode graphs; 0.5.23's prefill graphs,
#: before them): the same absence is stuck.
PIECEWISE_BEGIN = PREFILL_CAPTURE_BEGIN
PIECEWISE_END = PREFILL_CAPTURE_END
#: The rank tags of sglang's default log prefix, e.g. `[2026-05-05 04:41:51 DP2 TP2 EP2]` → `DP2 TP2 EP2`.
RANK_PREFIX = re.compile(r"^\[[^\]]*?\b((?:[DTPE]P\d+\s*)+)\]")


@dataclass(frozen=True)
class FatalLine:
    code: str
    line: str
    meaning: str
    fix: str


def _verdict(pat: FatalPattern, line: str, m: re.Match[str]) -> FatalLine:
    meaning = pat.meaning if pat.detail is None else f"{pat.meaning}: {pat.detail(m)}"
    return FatalLine(pat.code, line.strip(), meaning, pat.fix)


@dataclass
class CapturePhase:
    """Which ranks are inside CUDA-graph capture: their capture's begin line has no end line after it yet.

    Fed line by line across health probes, so that an out-of-memory line during capture is told from one
    elsewhere, and a wait that ends while a rank is still capturing can say so.
    """

    open: dict[str, str] = field(default_factory=dict)  # rank tag ("" without one) -> its begin line

    def feed(self, line: str) -> None:
        if CAPTURE_STUCK.pattern.search(line) or PIECEWISE_BEGIN.search(line):
            self.open[rank_of(line)] = line.strip()
        elif CAPTURE_END.search(line) or PIECEWISE_END.search(line):
            self.open.pop(rank_of(line), None)

    @property
    def capturing(self) -> bool:
        return bool(self.open)

    def stuck(self) -> FatalLine | None:
        """The capture-stuck verdict, quoting the oldest begin line still open; None when no rank is capturing."""
        if not self.open:
            return None
        line = next(iter(self.open.values()))
        m = CAPTURE_STUCK.pattern.search(line) or PIECEWISE_BEGIN.search(line)
        assert m is not None
        stuck = _verdict(CAPTURE_STUCK, line, m)
        if PIECEWISE_BEGIN.search(line):  # the prefill-side graphs have their own switch
            kind = "Prefill CUDA-graph capture" if "target prefill" in line else "Piecewise CUDA-graph capture"
            return FatalLine(stuck.code, stuck.line, stuck.meaning.replace("CUDA-graph capture", kind),
                             f"set `{prefill_capture_switch(line)}` in the profile's flags to confirm; " + stuck.fix)
        return stuck


def rank_of(line: str) -> str:
    m = RANK_PREFIX.match(line.strip())
    return " ".join(m.group(1).split()) if m else ""


def find_fatal(lines: list[str], phase: CapturePhase | None = None) -> FatalLine | None:
    """The first known fatal line. `phase` carries the capture state over from earlier lines (and is updated):
    an out-of-memory line while a rank is capturing CUDA graphs is `cuda-graph-oom`, not plain `cuda-oom`."""
    phase = phase if phase is not None else CapturePhase()
    for i, line in enumerate(lines):
        phase.feed(line)
        for pat in FATAL_PATTERNS:
            m = pat.pattern.search(line)
            if m is not None:
                hit = _verdict(CUDA_GRAPH_OOM if pat is CUDA_OOM and phase.capturing else pat, line, m)
                return _with_server_advice(hit, lines[i + 1:i + 4]) if pat is PIECEWISE_CUDA_GRAPH else hit
    return None


def gpu_xids(text: str) -> list[FatalLine]:
    """The kernel log's GPU Xid lines (`journalctl -k | grep 'NVRM: Xid'`), each judged on its own."""
    return [hit for ln in text.splitlines() if (hit := find_fatal([ln])) is not None and hit.code == "gpu-xid"]


def _with_server_advice(hit: FatalLine, after: list[str]) -> FatalLine:
    """The piecewise verdict quoting the server's own workaround line when it follows (it does, two lines on)."""
    for line in after:
        m = WORKAROUND.search(line)
        if m is not None:
            return FatalLine(hit.code, hit.line, hit.meaning,
                             f"the server says {m.group(0).strip()!r}: set `disable-piecewise-cuda-graph: true` in "
                             "the profile's flags (deploy roll HOST --set disable-piecewise-cuda-graph=true)")
    return hit


def argparse_error(lines: list[str]) -> str | None:
    """sglang's own flag error (`sglang serve: error: ...`), if the server died parsing its command line."""
    for line in reversed(lines):
        if ": error: " in line and ("unrecognized arguments" in line or "invalid choice" in line
                                    or "ambiguous option" in line or "expected" in line):
            return line.strip()
    return None
