"""The boot lines released sglang and flashinfer print, as patterns (pure): the boot ledger and the verdicts key on
these, so both versions' wordings live in one place.

Each is the format string of a released wheel (tests/fixtures/sglang/lines/formats.tsv names wheel, file and line):
0.5.12.post1 captures `Capture cuda graph begin. …` then `Capture piecewise CUDA graph begin. …`; 0.5.23 captures
`Capture target prefill CUDA graph begin. backend=…` then `Capture target decode CUDA graph begin. backend=…`
(`target verify` with speculative decoding). flashinfer 0.7.2 logs `Building JIT module NAME; this can take several
minutes on first use.` only when it compiles the module (its library is absent); 0.6.11.post1 logs no JIT line.
"""

from __future__ import annotations

import re

#: The decode graphs' capture: 0.5.12.post1 (`cuda graph`) and 0.5.23 (`target decode|verify CUDA graph`).
DECODE_CAPTURE_BEGIN = re.compile(r"Capture (?:cuda graph|target (?:decode|verify) CUDA graph) begin\b")
DECODE_CAPTURE_END = re.compile(r"Capture (?:cuda graph|target (?:decode|verify) CUDA graph) end\b")
#: The prefill-side graphs: 0.5.12.post1's piecewise graphs, 0.5.23's prefill graphs (captured before decode).
PREFILL_CAPTURE_BEGIN = re.compile(r"Capture (?:piecewise|target prefill) CUDA graph begin\b")
PREFILL_CAPTURE_END = re.compile(r"Capture (?:piecewise|target prefill) CUDA graph end\b")
#: sglang's autotune line, with its cache (both releases) or without (0.5.23, SGLANG_FLASHINFER_AUTOTUNE_CACHE=0).
AUTOTUNE_BEGIN = re.compile(r"Running FlashInfer autotune (?:with cache:|\(cache reuse DISABLED)")
#: flashinfer 0.7.2's cold build of one JIT module (printed once per module, only when it compiles it).
JIT_BUILD = re.compile(r"Building JIT module (?P<module>\S+); this can take several minutes on first use\.")
READY = "The server is fired up and ready to roll!"


def prefill_capture_switch(begin_line: str) -> str:
    """The profile flag that turns the prefill-side graphs off, for the release whose begin line this is."""
    if "target prefill" in begin_line:  # 0.5.23: `--disable-piecewise-cuda-graph` is gone
        return "cuda-graph-backend-prefill: disabled"
    return "disable-piecewise-cuda-graph: true"
