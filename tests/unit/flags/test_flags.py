"""Flag schemas and canonical flag sets, tested on the real argparse dumps of sglang 0.5.12.post1 and 0.5.23."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, apply_changes, canonicalize, diff_flags, parse_set
from orchestrator.inventory.loader import load_inventory
from tests.shared import EXAMPLE_INVENTORY, FIXTURES

ROOT = Path(__file__).resolve().parents[3]
OLD, NEW = "0.5.12.post1", "0.5.23"


@pytest.fixture(scope="module")
def old() -> FlagSchema:
    return FlagSchema.load(OLD)


@pytest.fixture(scope="module")
def new() -> FlagSchema:
    return FlagSchema.load(NEW)


def problems(exc: pytest.ExceptionInfo[ConfigError]) -> list[dict[str, str]]:
    return exc.value.details["problems"]  # type: ignore[return-value]


def test_known_versions_and_unknown_version() -> None:
    assert FlagSchema.known_versions() == [OLD, NEW]
    with pytest.raises(ConfigError) as exc:
        FlagSchema.load("0.4.0")
    assert "0.5.12.post1" in exc.value.what and "0.5.23" in exc.value.what
    assert exc.value.exit_code == 2


def test_packaged_schema_equals_the_reference_dump(old: FlagSchema) -> None:
    ref = FIXTURES / "sglang" / f"sglang-{OLD}-server-flags.json"
    assert FlagSchema.from_dump(ref.read_text(), OLD).specs == old.specs


def test_from_dump_rejects_garbage() -> None:
    with pytest.raises(ConfigError):
        FlagSchema.from_dump("not json")
    with pytest.raises(ConfigError):
        FlagSchema.from_dump([{"dest": "x"}])
    mini = FlagSchema.from_dump(json.dumps([{"option_strings": ["--foo-bar"], "dest": "foo_bar", "nargs": None,
                                             "choices": None, "type": "int", "default": 1,
                                             "action": "_StoreAction"}]), "dev")
    assert canonicalize({"foo": "3"}, mini).argv() == ["--foo-bar", "3"]


def test_tp_is_an_abbreviation_rendered_canonically(old: FlagSchema, new: FlagSchema) -> None:
    fs = canonicalize({"tp": 8}, old)
    assert fs.argv() == ["--tensor-parallel-size", "8"]
    assert fs.renamed == {"tp": "tensor-parallel-size"}
    # alias and canonical name give the same result
    assert canonicalize({"tp-size": 8}, old).argv() == ["--tensor-parallel-size", "8"]
    # 0.5.23 declares dest tp_size: --tp-size is its canonical name
    assert canonicalize({"tp": 8}, new).argv() == ["--tp-size", "8"]
    assert canonicalize({"tensor-parallel-size": 8}, new).argv() == ["--tp-size", "8"]


def test_alias_and_canonical_twice_is_an_error(old: FlagSchema) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"tp": 8, "tensor-parallel-size": 8}, old)
    assert "same option" in exc.value.what


def test_cuda_graph_max_bs_valid_old_ambiguous_new(old: FlagSchema, new: FlagSchema) -> None:
    assert canonicalize({"cuda-graph-max-bs": 256}, old).argv() == ["--cuda-graph-max-bs", "256"]
    with pytest.raises(ConfigError) as exc:
        canonicalize({"cuda-graph-max-bs": 256}, new)
    p = problems(exc)[0]
    assert "ambiguous" in p["error"]
    assert "--cuda-graph-max-bs-decode" in p["error"] and "--cuda-graph-max-bs-prefill" in p["error"]
    assert "split into" in p["suggestion"]


def test_nsa_rejected_in_new_with_dsa_suggestion(new: FlagSchema) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"nsa-prefill-backend": "trtllm", "nsa-decode-backend": "trtllm"}, new)
    by_flag = {p["flag"]: p for p in problems(exc)}
    assert "unknown flag" in by_flag["--nsa-prefill-backend"]["error"]
    assert "renamed to --dsa-prefill-backend in 0.5.23?" in by_flag["--nsa-prefill-backend"]["suggestion"]
    assert "--dsa-decode-backend" in by_flag["--nsa-decode-backend"]["suggestion"]
    assert "--dsa-prefill-backend" in exc.value.what  # the message itself names the new flag


def test_dsa_rejected_in_old(old: FlagSchema) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"dsa-prefill-backend": "trtllm"}, old)
    assert "--nsa-prefill-backend" in problems(exc)[0]["suggestion"]


def test_typo_gets_close_match(old: FlagSchema) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"max-runing-requests": 5}, old)
    assert "--max-running-requests" in problems(exc)[0]["suggestion"]


def test_bad_choice_lists_choices(old: FlagSchema) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"kv-cache-dtype": "fp9"}, old)
    err = problems(exc)[0]["error"]
    assert "invalid choice 'fp9'" in err
    for choice in ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"):
        assert choice in err


def test_value_types(old: FlagSchema) -> None:
    fs = canonicalize({"mem-fraction-static": 0.9, "max-running-requests": "2048", "cuda-graph-bs": [1, 2, 4],
                       "json-model-override-args": '{"a": 1}', "chunked-prefill-size": -1}, old)
    assert fs.values["max-running-requests"] == 2048
    assert fs.argv() == ["--chunked-prefill-size", "-1", "--cuda-graph-bs", "1", "2", "4",
                         "--json-model-override-args", '{"a": 1}', "--max-running-requests", "2048",
                         "--mem-fraction-static", "0.9"]
    for bad in ({"max-running-requests": "many"}, {"max-running-requests": 1.5}, {"mem-fraction-static": "x"},
                {"preferred-sampling-params": "{not json"}, {"max-running-requests": True},
                {"trust-remote-code": "maybe"}):
        with pytest.raises(ConfigError):
            canonicalize(bad, old)


def test_store_true_false_is_omitted(old: FlagSchema) -> None:
    fs = canonicalize({"trust-remote-code": True, "enable-metrics": False}, old)
    assert fs.argv() == ["--trust-remote-code"]


def test_boolean_optional_action(new: FlagSchema) -> None:
    assert canonicalize({"enable-tf32-matmul": False}, new).argv() == ["--no-enable-tf32-matmul"]
    assert canonicalize({"no-enable-tf32-matmul": True}, new).argv() == ["--no-enable-tf32-matmul"]
    assert canonicalize({"enable-tf32-matmul": True}, new).argv() == ["--enable-tf32-matmul"]


def test_profile_owned_flags_refused(old: FlagSchema) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"model": "/x", "api-key": "s"}, old)
    assert {p["flag"] for p in problems(exc)} == {"--model", "--api-key"}
    with pytest.raises(ConfigError):
        canonicalize({"help": True}, old)


def test_glm5_profile_canonicalises_cleanly(old: FlagSchema) -> None:
    inv = load_inventory(EXAMPLE_INVENTORY)
    fs = canonicalize(inv.profiles["glm5-nvfp4"].flags, old)
    argv = fs.argv()
    names = [w for w in argv if w.startswith("--")]
    assert names == sorted(names)
    joined = " ".join(argv)
    for want in ("--tensor-parallel-size 8", "--nsa-prefill-backend trtllm", "--nsa-decode-backend trtllm",
                 "--max-running-requests 2048", "--num-continuous-decode-steps 8", "--trust-remote-code",
                 "--enable-metrics", "--mem-fraction-static 0.9", "--quantization modelopt_fp4"):
        assert want in joined
    assert fs.notes == ()


def test_glm5_profile_against_new_schema_names_every_rename(new: FlagSchema) -> None:
    inv = load_inventory(EXAMPLE_INVENTORY)
    with pytest.raises(ConfigError) as exc:
        canonicalize(inv.profiles["glm5-nvfp4"].flags, new)
    assert {p["flag"] for p in problems(exc)} == {"--nsa-prefill-backend", "--nsa-decode-backend"}


def test_deterministic_argv(old: FlagSchema) -> None:
    a = canonicalize({"tp": 8, "enable-metrics": True, "kv-cache-dtype": "bf16"}, old)
    b = canonicalize({"kv-cache-dtype": "bf16", "enable-metrics": True, "tp": 8}, old)
    assert a.argv() == b.argv() and a == b


def test_diff_and_apply_changes(old: FlagSchema) -> None:
    base = canonicalize({"tp": 8, "max-running-requests": 1024, "enable-metrics": True}, old)
    sets = parse_set(["max-running-requests=2048", "--num-continuous-decode-steps=8", "enable-metrics=false",
                      "trust-remote-code", "cuda-graph-bs=1,2,4"], old)
    assert sets["max-running-requests"] == 2048 and sets["num-continuous-decode-steps"] == 8
    assert sets["cuda-graph-bs"] == [1, 2, 4] and sets["trust-remote-code"] is True
    new = apply_changes(base, sets, unset=["tp"])
    assert new.as_dict() == {"cuda-graph-bs": [1, 2, 4], "max-running-requests": 2048,
                             "num-continuous-decode-steps": 8, "trust-remote-code": True}
    assert diff_flags(base, new) == [
        ("cuda-graph-bs", None, [1, 2, 4]),
        ("enable-metrics", True, None),
        ("max-running-requests", 1024, 2048),
        ("num-continuous-decode-steps", None, 8),
        ("tensor-parallel-size", 8, None),
        ("trust-remote-code", None, True),
    ]
    assert diff_flags(base, base) == []


def test_apply_changes_errors(old: FlagSchema) -> None:
    base = canonicalize({"tp": 8}, old)
    with pytest.raises(ConfigError):
        apply_changes(base, {"tp": 4}, unset=["tensor-parallel-size"])
    with pytest.raises(ConfigError):
        apply_changes(base, {}, unset=["max-running-requests"])
    with pytest.raises(ConfigError):
        parse_set(["max-running-requests"], old)  # needs a value
    with pytest.raises(ConfigError) as exc:
        parse_set(["nsa-prefill-backend=trtllm"], FlagSchema.load(NEW))
    assert "--dsa-prefill-backend" in exc.value.what
