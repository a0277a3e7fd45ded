"""bench_serving argv from a preset and a profile; override allowlist."""

from __future__ import annotations

import shlex

import pytest

from orchestrator.bench.command import BenchFlagError, bench_argv, bench_command
from orchestrator.errors import ConfigError
from orchestrator.inventory.models import BenchPreset, ServerProfile

PROFILE = ServerProfile(model_path="/models/GLM-5-NVFP4", served_model_name="glm-5",
                        tokenizer="lukealonso/GLM-5-NVFP4", sglang_version="0.5.12.post1", host="0.0.0.0")
SEED = BenchPreset(dataset_name="random-ids", random_input_len=128, random_output_len=256, random_range_ratio=1.0,
                   num_prompts=1024, request_rate=999)


def flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i = 3
    while i < len(argv):
        key = argv[i][2:]
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[key] = argv[i + 1]
            i += 2
        else:
            out[key] = None
            i += 1
    return out


def test_seed_preset() -> None:
    argv = bench_argv(SEED, PROFILE, "/root/bench/r-1.jsonl")
    assert argv[:3] == ["/root/ml-env/bin/python3", "-m", "sglang.bench_serving"]
    assert flags(argv) == {
        "backend": "sglang", "host": "127.0.0.1", "port": "8000", "model": "glm-5",
        "tokenizer": "lukealonso/GLM-5-NVFP4", "dataset-name": "random-ids", "random-input-len": "128",
        "random-output-len": "256", "random-range-ratio": "1", "num-prompts": "1024", "request-rate": "999",
        "seed": "1", "warmup-requests": "1", "output-file": "/root/bench/r-1.jsonl", "disable-tqdm": None}


def test_max_concurrency_inf_rate_and_tokenizer_fallback() -> None:
    preset = SEED.model_copy(update={"request_rate": "inf", "max_concurrency": 512, "random_range_ratio": 0.5,
                                     "dataset_path": "/data/sharegpt.json", "dataset_name": "sharegpt"})
    prof = PROFILE.model_copy(update={"tokenizer": None, "host": "10.0.0.5", "port": 30000})
    f = flags(bench_argv(preset, prof, "o.jsonl", python="python3"))
    assert f["request-rate"] == "inf" and f["max-concurrency"] == "512" and f["random-range-ratio"] == "0.5"
    assert f["tokenizer"] == "/models/GLM-5-NVFP4" and f["host"] == "10.0.0.5" and f["port"] == "30000"
    assert f["dataset-path"] == "/data/sharegpt.json"


def test_overrides() -> None:
    argv = bench_argv(SEED, PROFILE, "o.jsonl", {"--max-concurrency": "256", "num_prompts": "2048",
                                                 "request-rate": "INF", "flush-cache": "true",
                                                 "tag": "it's a tag"})
    f = flags(argv)
    assert f["max-concurrency"] == "256" and f["num-prompts"] == "2048" and f["request-rate"] == "inf"
    assert "flush-cache" in f and f["tag"] == "it's a tag"
    assert argv.count("--num-prompts") == 1
    cmd = bench_command(SEED, PROFILE, "o.jsonl", {"tag": "it's a tag"})
    assert shlex.split(cmd)[-5:-3] == ["--tag", "it's a tag"]


def test_unknown_and_owned_flags_refused() -> None:
    with pytest.raises(ValueError, match="unknown bench flag --max-running-requests") as info:
        bench_argv(SEED, PROFILE, "o.jsonl", {"max-running-requests": "2048"})
    assert isinstance(info.value, ConfigError) and isinstance(info.value, BenchFlagError)
    assert "max-concurrency" in info.value.fix and "num-prompts" in info.value.fix
    with pytest.raises(ValueError, match="set by the tool"):
        bench_argv(SEED, PROFILE, "o.jsonl", {"port": "9000"})


@pytest.mark.parametrize(("key", "value"), [("num-prompts", "0"), ("num-prompts", "x"), ("request-rate", "-1"),
                                            ("random-range-ratio", "1.5"), ("dataset-name", "mmmu"),
                                            ("flush-cache", "maybe"), ("tag", "a\nb")])
def test_bad_values_refused(key: str, value: str) -> None:
    with pytest.raises(BenchFlagError):
        bench_argv(SEED, PROFILE, "o.jsonl", {key: value})


def test_output_file_required() -> None:
    with pytest.raises(ValueError):
        bench_argv(SEED, PROFILE, "")
