"""The remote script that runs a bench with GPU samplers around it, in ONE ssh channel, and reads its output back.

Why one script: the samplers must start before the bench and stop right after it; doing that over three SSH
round trips would put network latency into the window and leave samplers running if the connection drops. The
script runs on the PVE host (nvidia-smi sees every GPU there); the bench itself runs in the container through the
`pct exec VMID -- ...` command string the caller gives.

Output framing: every section is wrapped in `@@deploy-<nonce> begin <name>` / `@@deploy-<nonce> end <name>`
lines, with a random nonce so no bench output can forge a frame. A `meta` line carries the bench exit code and the
host-local start/end instants in nvidia-smi's own timestamp format, so the telemetry window and the samples share
one clock.
"""

from __future__ import annotations

import re
import secrets
import shlex
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

    `bench_command` is a complete shell command the caller already quoted (e.g. `shlex.join(["pct", "exec",
    "120", "--", *bench_argv(...)])`); it runs in a subshell with stdin from /dev/null. `extra_sections` are
    (name, shell command) pairs run after the samplers stop, each printed as its own section -- e.g.
    ("jsonl", "pct exec 120 -- tail -n 1 /root/bench/run.jsonl") to fetch the result file in the same channel.
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
    q = shlex.quote
    marker = f"@@deploy-{nonce}"
    ts_fmt = "+%Y/%m/%d %H:%M:%S.%3N"  # nvidia-smi's --query-gpu timestamp format
    lines = [
        "set -u",
        "umask 077",
        f"D=$(mktemp -d {q(tmp_dir.rstrip('/') + '/deploy-bench.XXXXXX')}) || exit 97",
        f"M={q(marker)}",
        "QP=; DP=",
        'cleanup() { [ -n "$QP" ] && kill "$QP" 2>/dev/null; [ -n "$DP" ] && kill "$DP" 2>/dev/null; '
        'rm -rf "$D"; }',
        "trap cleanup EXIT",
        "trap 'exit 130' HUP INT TERM",
        'section() { echo "$M begin $1"; [ -f "$2" ] && awk 1 "$2"; echo "$M end $1"; }',
        f'{shlex.join(static_query_argv(STATIC_FIELDS))} >"$D/static.csv" 2>/dev/null',
        # Line-buffer the samplers where coreutils' stdbuf exists, so stopping them loses no buffered tail.
        "SB=; command -v stdbuf >/dev/null 2>&1 && SB='stdbuf -oL'",
        f'$SB {shlex.join(sampler_argv(query_interval_ms, query_fields))} >"$D/query.csv" 2>"$D/query.err" &',
        "QP=$!",
        f'$SB {shlex.join(dmon_argv(dmon_interval_s))} >"$D/dmon.txt" 2>"$D/dmon.err" &',
        "DP=$!",
        f"sleep {lead_in_s:g}",
        f"T0=$(date {q(ts_fmt)})",
        "(",
        bench_command,
        ') >"$D/bench.out" 2>&1 </dev/null',
        "RC=$?",
        f"T1=$(date {q(ts_fmt)})",
        # The samplers' own CPU time over the window (utime+stime in clock ticks): their measured overhead.
        'CPU=$(cat /proc/"$QP"/stat /proc/"$DP"/stat 2>/dev/null | awk \'{t += $14 + $15} END {print t + 0}\')',
        "HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)",
        # SIGINT first (nvidia-smi ends its loop cleanly on it), SIGTERM for anything still running.
        'kill -INT "$QP" "$DP" 2>/dev/null; sleep 0.3; kill "$QP" "$DP" 2>/dev/null',
        'wait "$QP" "$DP" 2>/dev/null; QP=; DP=',
    ]
    for i, (_name, cmd) in enumerate(extra_sections):
        lines.append(f'( {cmd}\n) >"$D/extra{i}.out" 2>&1 </dev/null')
    lines += [
        'echo "$M meta bench_rc=$RC start=$T0 end=$T1"',
        'echo "$M sampler_cpu ticks=$CPU hz=$HZ"',
        'section static "$D/static.csv"',
        'section bench "$D/bench.out"',
        'section query "$D/query.csv"',
        'section dmon "$D/dmon.txt"',
        '[ -s "$D/query.err" ] && section query_err "$D/query.err"',
        '[ -s "$D/dmon.err" ] && section dmon_err "$D/dmon.err"',
    ]
    for i, (name, _) in enumerate(extra_sections):
        lines.append(f'section {name} "$D/extra{i}.out"')
    lines.append('exit "$RC"')
    return SamplerScript(script="\n".join(lines) + "\n", nonce=nonce, query_fields=tuple(query_fields))


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
