"""Known fatal lines in an SGLang server log: seeing one ends a health wait at once, quoting the line."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FatalPattern:
    code: str
    pattern: re.Pattern[str]
    meaning: str
    fix: str


FATAL_PATTERNS: tuple[FatalPattern, ...] = (
    FatalPattern("nan", re.compile(r"probability tensor contains either .inf., .nan.|\bnan\b.*(detected|logits)",
                                   re.IGNORECASE),
                 "the sampler saw NaN/inf probabilities (FP4 GEMM race or a backend bug on this GPU)",
                 "try --fp4-gemm-backend flashinfer_cudnn, wipe the JIT cache, or roll back"),
    FatalPattern("unsupported-arch", re.compile(r"Unsupported architecture"),
                 "a kernel (e.g. trtllm-gen NSA/DSA) has no build for this GPU architecture (SM120)",
                 "pick another NSA/DSA backend (e.g. flashinfer_sparse_mla / tilelang) or a build with SM120 "
                 "kernels"),
    FatalPattern("cuda-oom", re.compile(r"CUDA out of memory|OutOfMemoryError|out of memory.*cuda graph",
                                        re.IGNORECASE),
                 "CUDA ran out of memory (often during CUDA-graph capture)",
                 "lower --cuda-graph-max-bs / --mem-fraction-static / --max-running-requests"),
    FatalPattern("no-cuda-arch", re.compile(r"No supported CUDA architectures found"),
                 "a fused kernel was built for other GPU generations",
                 "drop the fusion flag (e.g. --enable-flashinfer-allreduce-fusion) for this GPU"),
)


@dataclass(frozen=True)
class FatalLine:
    code: str
    line: str
    meaning: str
    fix: str


def find_fatal(lines: list[str]) -> FatalLine | None:
    for line in lines:
        for pat in FATAL_PATTERNS:
            if pat.pattern.search(line):
                return FatalLine(pat.code, line.strip(), pat.meaning, pat.fix)
    return None


def argparse_error(lines: list[str]) -> str | None:
    """sglang's own flag error (`sglang serve: error: ...`), if the server died parsing its command line."""
    for line in reversed(lines):
        if ": error: " in line and ("unrecognized arguments" in line or "invalid choice" in line
                                    or "ambiguous option" in line or "expected" in line):
            return line.strip()
    return None
