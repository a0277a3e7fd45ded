"""The remote script that runs a bench with GPU samplers around it, in ONE ssh channel, and reads its output back.

Why one script: the samplers must start before the bench and stop right after it; doing that over three SSH
round trips would put network latency into the window and leave samplers running if the connection drops. The
script (orchestrator/scripts/sampled_bench.sh.j2) runs on the PVE host (nvidia-smi sees every GPU there); the
bench itself runs in the container through the command the caller built with the container adapter.

Output framing: every section is wrapped in `@@deploy-<nonce> begin <name>` / `@@deploy-<nonce> end <name>`
lines, with a random nonce so no bench output can forge a frame. A `meta` line carries the bench exit code and the
host-local start/end instants in nvidia-smi's own timestamp format, so the telemetry window and the samples share
one clock.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.parsers.dmon import dmon_argv, parse_dmon
from orchestrator.parsers.gpu_query import (
    DEFAULT_INTERVAL_MS,
    SAMPLER_FIELDS,
    STATIC_FIELDS,
    Sample,
    parse_query_gpu,
    parse_timestamp,
    sampler_argv,
    static_query_argv,
)
from orchestrator.scripts import render_script

_SECTION_NAME = re.compile(r"[a-z][a-z0-9_]*")
_RESERVED = {"static", "bench", "query", "dmon", "query_err", "dmon_err"}


class SamplerOutputError(ValueError):
    """The script's output lacks its frames: the connection dropped or the script did not run."""


@dataclass(frozen=True)
class SamplerScript:
    """The bash text to run on the host and the nonce its output frames carry."""

    script: str
    nonce: str
    query_fields: tuple[str, ...]


def build_sampled_bench_script(
    bench_command: str,
    *,
    query_interval_ms: int = DEFAULT_INTERVAL_MS,
    dmon_interval_s: int = 1,
    query_fields: Sequence[str] = SAMPLER_FIELDS,
    extra_sections: Sequence[tuple[str, str]] = (),
    lead_in_s: float = 1.0,
    nonce: str | None = None,
    tmp_dir: str = "/tmp",
) -> SamplerScript:
    """A bash script: static query, start both samplers, run `bench_command`, stop samplers, print everything.

    `bench_command` is a complete shell command the caller already quoted (e.g. the container adapter's
    `exec_command(bench_argv(...))`); it runs in a subshell with stdin from /dev/null. `extra_sections` are
    (name, shell command) pairs run after the samplers stop, each printed as its own section -- e.g.
    ("jsonl", container.exec_command(["cat", path])) to fetch the result file in the same channel.
    `lead_in_s` lets the samplers produce their first rows before load starts.
    """
    if not bench_command.strip():
        raise ValueError("bench_command is empty")
    if lead_in_s < 0:
        raise ValueError("lead_in_s must be >= 0")
    nonce = nonce or secrets.token_hex(8)
    if not re.fullmatch(r"[A-Za-z0-9]{6,64}", nonce):
        raise ValueError("nonce must be 6-64 letters or digits")
    names = [n for n, _ in extra_sections]
    for n in names:
        if not _SECTION_NAME.fullmatch(n) or n in _RESERVED:
            raise ValueError(f"bad extra section name {n!r} (lowercase identifier, not one of {sorted(_RESERVED)})")
    if len(set(names)) != len(names):
        raise ValueError("extra section names must be unique")
    script = render_script(
        "sampled_bench.sh.j2", tmp_dir=tmp_dir.rstrip("/"), marker=f"@@deploy-{nonce}",
        static_argv=static_query_argv(STATIC_FIELDS), sampler_argv=sampler_argv(query_interval_ms, query_fields),
        dmon_argv=dmon_argv(dmon_interval_s), lead_in=f"{lead_in_s:g}",
        ts_fmt="+%Y/%m/%d %H:%M:%S.%3N",  # nvidia-smi's --query-gpu timestamp format
        bench_command=bench_command, extra_sections=list(extra_sections))
    return SamplerScript(script=script, nonce=nonce, query_fields=tuple(query_fields))


@dataclass(frozen=True)
class SampledRun:
    """What the script printed, split by section; timestamps are host-local, like the samples'."""

    bench_rc: int
    started_at: datetime
    ended_at: datetime
    sections: dict[str, str] = field(hash=False)
    sampler_cpu_s: float | None = None  # CPU seconds both samplers used during the window

    @property
    def sampler_overhead_pct(self) -> float | None:
        """Sampler CPU time as a share of one host core over the window: the cost of measuring."""
        if self.sampler_cpu_s is None or self.duration_s <= 0:
            return None
        return 100.0 * self.sampler_cpu_s / self.duration_s

    @property
    def duration_s(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()

    def section(self, name: str) -> str:
        return self.sections.get(name, "")


def parse_sampled_output(text: str, nonce: str) -> SampledRun:
    """Split the script's stdout into sections by its nonce frames."""
    marker = f"@@deploy-{nonce}"
    meta: dict[str, str] | None = None
    cpu_s: float | None = None
    sections: dict[str, str] = {}
    current: str | None = None
    buf: list[str] = []
    for line in text.splitlines():
        if line.startswith(marker + " "):
            rest = line[len(marker) + 1:]
            if rest.startswith("sampler_cpu "):
                c = re.fullmatch(r"sampler_cpu ticks=(\d+) hz=(\d+)", rest)
                if c and int(c.group(2)) > 0:
                    cpu_s = int(c.group(1)) / int(c.group(2))
                continue
            if rest.startswith("meta "):
                m = re.fullmatch(r"meta bench_rc=(\d+) start=(.+?) end=(.+)", rest)
                if not m:
                    raise SamplerOutputError(f"malformed meta line: {line!r}")
                meta = {"rc": m.group(1), "start": m.group(2), "end": m.group(3)}
            elif rest.startswith("begin "):
                current, buf = rest[6:].strip(), []
            elif rest.startswith("end ") and current is not None:
                sections[current] = "\n".join(buf) + ("\n" if buf else "")
                current = None
            continue
        if current is not None:
            buf.append(line)
    if meta is None:
        raise SamplerOutputError("no meta line in the sampler output: the script did not finish "
                                 "(connection dropped or killed)")
    start, end = parse_timestamp(meta["start"]), parse_timestamp(meta["end"])
    if start is None or end is None:
        raise SamplerOutputError(f"unreadable start/end times {meta['start']!r} / {meta['end']!r}")
    return SampledRun(bench_rc=int(meta["rc"]), started_at=start, ended_at=end, sections=sections,
                      sampler_cpu_s=cpu_s)


def run_samples(run: SampledRun, query_fields: Sequence[str] = SAMPLER_FIELDS) -> tuple[list[Sample], list[Sample]]:
    """(loop samples from both samplers, static one-shot samples) ready for `telemetry.summary.summarize`."""
    samples: list[Sample] = []
    if run.section("query").strip():
        samples += parse_query_gpu(run.section("query"), query_fields, drop_torn_tail=True)
    if run.section("dmon").strip():
        samples += list(parse_dmon(run.section("dmon"), day=run.started_at.date()).samples)
    static = parse_query_gpu(run.section("static"), STATIC_FIELDS) if run.section("static").strip() else []
    return samples, static
