"""`python -m sglang.bench_serving` argv from a BenchPreset and a ServerProfile.

The tool owns where the bench points (host, port, model, tokenizer) and where it writes (`--output-file`, one
fresh file per run because bench_serving appends); an operator may override the load shape through an
allowlist. Every flag is rendered explicitly, `--random-range-ratio` included, because bench_serving's defaults
(range ratio 0 -> lengths uniform in [1, len]) make runs incomparable.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping

from orchestrator.errors import ConfigError, did_you_mean
from orchestrator.inventory.models import BenchPreset, ServerProfile


class BenchFlagError(ConfigError, ValueError):
    """An override names a flag outside the allowlist or gives it a bad value (a ValueError and a ConfigError)."""


def _int(v: str) -> str:
    n = int(v)
    if n < 0:
        raise ValueError("must be >= 0")
    return str(n)


def _pos_int(v: str) -> str:
    n = int(v)
    if n < 1:
        raise ValueError("must be >= 1")
    return str(n)


def _ratio(v: str) -> str:
    f = float(v)
    if not 0.0 <= f <= 1.0:
        raise ValueError("must be within [0, 1]")
    return _num(f)


def _rate(v: str) -> str:
    if v.strip().lower() in ("inf", "infinity"):
        return "inf"
    f = float(v)
    if not f > 0 or math.isnan(f):
        raise ValueError("must be > 0 or 'inf'")
    return _num(f)


def _choice(*choices: str) -> Callable[[str], str]:
    def check(v: str) -> str:
        if v not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return v
    return check


def _text(v: str) -> str:
    if not v or "\n" in v:
        raise ValueError("must be a non-empty single line")
    return v


_FLAG = object()  # marker: a boolean switch, no value

# Overridable flag -> validator (or _FLAG for switches: value "true"/"" adds it, "false" removes it).
ALLOWED_OVERRIDES: dict[str, Callable[[str], str] | object] = {
    "num-prompts": _pos_int,
    "request-rate": _rate,
    "max-concurrency": _pos_int,
    "random-input-len": _pos_int,
    "random-output-len": _pos_int,
    "random-range-ratio": _ratio,
    "seed": _int,
    "warmup-requests": _int,
    "dataset-name": _choice("random", "random-ids", "sharegpt"),
    "dataset-path": _text,
    "backend": _choice("sglang", "sglang-oai", "sglang-oai-chat"),
    "tag": _text,
    "extra-request-body": _text,
    "apply-chat-template": _FLAG,
    "disable-ignore-eos": _FLAG,
    "disable-stream": _FLAG,
    "flush-cache": _FLAG,
    "output-details": _FLAG,
    "tokenize-prompt": _FLAG,
}
# Owned by the tool: pointing the bench elsewhere or at another file would break parsing and history.
OWNED_FLAGS = ("host", "port", "base-url", "model", "tokenizer", "served-model-name", "output-file",
               "disable-tqdm")


def _num(f: float) -> str:
    """999.0 -> '999', 0.5 -> '0.5', inf -> 'inf' (bench_serving parses all three)."""
    if math.isinf(f):
        return "inf"
    return str(int(f)) if float(f).is_integer() else repr(float(f))


def connect_host(profile: ServerProfile) -> str:
    """The bench runs next to the server: a wildcard bind address is reached on loopback."""
    return "127.0.0.1" if profile.host in ("", "0.0.0.0", "::", "[::]") else profile.host


def bench_argv(
    preset: BenchPreset,
    profile: ServerProfile,
    output_file: str,
    overrides: Mapping[str, str] | None = None,
    *,
    python: str | None = None,
) -> list[str]:
    """The bench_serving argv. `python` defaults to the profile venv's interpreter (no activation needed
    in the container). Overrides use long flag names with or without dashes: {"max-concurrency": "512"}.
    """
    if not output_file:
        raise ValueError("output_file is required: bench_serving appends, each run needs its own file")
    values: dict[str, str | None] = {
        "backend": preset.backend,
        "host": connect_host(profile),
        "port": str(profile.port),
        "model": profile.served_model_name,
        "tokenizer": profile.tokenizer or profile.model_path,
        "dataset-name": preset.dataset_name,
    }
    if preset.dataset_path:
        values["dataset-path"] = preset.dataset_path
    values |= {
        "random-input-len": str(preset.random_input_len),
        "random-output-len": str(preset.random_output_len),
        "random-range-ratio": _num(preset.random_range_ratio),
        "num-prompts": str(preset.num_prompts),
        "request-rate": "inf" if preset.request_rate == "inf" else _num(float(preset.request_rate)),
    }
    if preset.max_concurrency is not None:
        values["max-concurrency"] = str(preset.max_concurrency)
    values |= {"seed": str(preset.seed), "warmup-requests": str(preset.warmup_requests)}
    switches: list[str] = []

    allowed = ", ".join(sorted(ALLOWED_OVERRIDES))
    for raw_key, raw_val in (overrides or {}).items():
        key = raw_key.strip().lstrip("-").replace("_", "-")
        if key in OWNED_FLAGS:
            raise BenchFlagError(f"bench flag --{key} is set by the tool and cannot be overridden",
                                 fix=f"overridable flags: {allowed}")
        check = ALLOWED_OVERRIDES.get(key)
        if check is None:
            guess = did_you_mean(key, ALLOWED_OVERRIDES)
            raise BenchFlagError(f"unknown bench flag --{key}",
                                 fix=(f"did you mean --{guess}? " if guess else "") + f"overridable flags: {allowed}")
        if check is _FLAG:
            v = str(raw_val).strip().lower()
            if v in ("", "true", "1", "yes"):
                if key not in switches:
                    switches.append(key)
            elif v in ("false", "0", "no"):
                if key in switches:
                    switches.remove(key)
            else:
                raise BenchFlagError(f"bench switch --{key} takes true or false, not {raw_val!r}")
            continue
        assert callable(check)
        try:
            values[key] = check(str(raw_val))
        except ValueError as exc:
            raise BenchFlagError(f"bench flag --{key}={raw_val!r}: {exc}",
                                 fix="fix the value in --set / the preset") from exc

    argv = [python or f"{profile.venv.rstrip('/')}/bin/python3", "-m", "sglang.bench_serving"]
    for key, val in values.items():
        if val is not None:
            argv += [f"--{key}", val]
    argv += [f"--{s}" for s in switches]
    argv += ["--output-file", output_file, "--disable-tqdm"]
    return argv


def bench_command(preset: BenchPreset, profile: ServerProfile, output_file: str,
                  overrides: Mapping[str, str] | None = None, *, python: str | None = None) -> str:
    """The argv as one shell-quoted string (run in the container by the sampler script)."""
    return shlex.join(bench_argv(preset, profile, output_file, overrides, python=python))
