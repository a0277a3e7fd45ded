"""One torch-profiler chrome trace of an sglang scheduler, read into typed values (pure: bytes in).

What the real file holds (sglang 0.5.12.post1 on an H100, tests/fixtures/profile/PROVENANCE.md): a JSON object with
`distributedInfo` (`rank`, `world_size`), `deviceProperties`, and `traceEvents`. sglang wraps each forward pass in
`record_function("step[DECODE bs=N]")` (`model_runner.py`: `step[{mode.name} bs={bs}]`, extend steps add
`toks=`), which the profiler writes twice: as a `user_annotation` on the scheduler's CPU thread (the host's step,
launch included) and as a `gpu_user_annotation` on the GPU stream (first to last kernel of the step). GPU work is
`cat` `kernel`, `gpu_memcpy` and `gpu_memset`, each with `ts`/`dur` in microseconds on the same clock.
The file name carries the rank too (`…-TP-3-DECODE.trace.json.gz`), used when `distributedInfo` is absent.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError

GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_STEP = re.compile(r"^step\[(?P<mode>[A-Z_]+) bs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?\]$")
_RANK_IN_NAME = re.compile(r"-TP-(\d+)(?:-|\.)")


class TraceError(ConfigError):
    """A file that is not an sglang torch-profiler trace, or one without the steps asked for."""


@dataclass(frozen=True)
class GpuEvent:
    """One kernel, memcpy or memset on the GPU."""

    name: str
    start_us: float
    dur_us: float
    stream: int

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class Step:
    """One forward step: the host's annotation and, when the profiler recorded it, the GPU's."""

    mode: str
    batch_size: int
    cpu_start_us: float
    cpu_dur_us: float
    gpu_start_us: float | None = None
    gpu_dur_us: float | None = None

    @property
    def start_us(self) -> float:
        """The step's window opens when the host starts it (the GPU's part begins at its first launch)."""
        return self.cpu_start_us if self.gpu_start_us is None else min(self.cpu_start_us, self.gpu_start_us)

    @property
    def end_us(self) -> float:
        """...and closes when both the host and the GPU are done with it."""
        cpu_end = self.cpu_start_us + self.cpu_dur_us
        if self.gpu_start_us is None or self.gpu_dur_us is None:
            return cpu_end
        return max(cpu_end, self.gpu_start_us + self.gpu_dur_us)

    @property
    def dur_us(self) -> float:
        return self.end_us - self.start_us


@dataclass(frozen=True)
class Trace:
    """What one rank's trace file says."""

    source: str
    rank: int
    world_size: int | None
    device: str | None
    steps: tuple[Step, ...]
    events: tuple[GpuEvent, ...]

    def decode_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.mode == "DECODE")


def read_trace(path: str | Path) -> Trace:
    """Read a `.json.gz` or `.json` trace file; a missing or unreadable file is a TraceError naming it."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise TraceError(f"cannot read trace {p}: {e.strerror or e}",
                         fix="give the path of a .trace.json.gz that sglang's /start_profile wrote") from None
    return parse_trace(raw, p.name)


def parse_trace(raw: bytes, source: str) -> Trace:
    """Parse a trace's bytes (gzipped or plain JSON)."""
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        doc = json.loads(text)
    except (OSError, EOFError, ValueError) as e:
        raise TraceError(f"{source} is not a chrome trace (gzipped JSON or JSON): {e}",
                         fix="give a file written by sglang's /start_profile (SGLANG_TORCH_PROFILER_DIR)") from None
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{source} has no traceEvents list: not a torch-profiler chrome trace")
    return Trace(source=source, rank=_rank(doc, source), world_size=_world_size(doc), device=_device(doc),
                 steps=_steps(doc["traceEvents"]), events=_gpu_events(doc["traceEvents"]))


def _rank(doc: dict[str, Any], source: str) -> int:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    m = _RANK_IN_NAME.search(source)
    return int(m.group(1)) if m else 0


def _world_size(doc: dict[str, Any]) -> int | None:
    info = doc.get("distributedInfo")
    size = info.get("world_size") if isinstance(info, dict) else None
    return size if isinstance(size, int) else None


def _device(doc: dict[str, Any]) -> str | None:
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        name = props[0].get("name")
        return name if isinstance(name, str) else None
    return None


def _complete(e: Any) -> bool:
    return (isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)
            and isinstance(e.get("ts"), int | float) and isinstance(e.get("dur"), int | float))


def _gpu_events(events: list[Any]) -> tuple[GpuEvent, ...]:
    out = [GpuEvent(name=e["name"], start_us=float(e["ts"]), dur_us=float(e["dur"]),
                    stream=int(e.get("tid") or 0) if isinstance(e.get("tid"), int) else 0)
           for e in events if _complete(e) and e.get("cat") in GPU_CATEGORIES]
    return tuple(sorted(out, key=lambda g: g.start_us))


def _steps(events: list[Any]) -> tuple[Step, ...]:
    """Pair each CPU step annotation with the GPU annotation of the same name that follows it, in order."""
    cpu: list[tuple[float, float, str]] = []
    gpu: list[tuple[float, float, str]] = []
    for e in events:
        if not _complete(e) or not _STEP.match(e["name"]):
            continue
        if e.get("cat") == "user_annotation":
            cpu.append((float(e["ts"]), float(e["dur"]), e["name"]))
        elif e.get("cat") == "gpu_user_annotation":
            gpu.append((float(e["ts"]), float(e["dur"]), e["name"]))
    cpu.sort()
    gpu.sort()
    steps: list[Step] = []
    gi = 0
    for idx, (ts, dur, name) in enumerate(cpu):
        m = _STEP.match(name)
        assert m is not None
        next_cpu = cpu[idx + 1][0] if idx + 1 < len(cpu) else float("inf")
        g_ts: float | None = None
        g_dur: float | None = None
        while gi < len(gpu) and gpu[gi][0] < ts:
            gi += 1
        if gi < len(gpu) and gpu[gi][2] == name and gpu[gi][0] < next_cpu:
            g_ts, g_dur = gpu[gi][0], gpu[gi][1]
            gi += 1
        steps.append(Step(mode=m.group("mode"), batch_size=int(m.group("bs")), cpu_start_us=ts, cpu_dur_us=dur,
                          gpu_start_us=g_ts, gpu_dur_us=g_dur))
    return tuple(steps)
