"""The stand-in server's /generate with logprobs, through the real golden probe, judged by the real gate.

The answers must be deterministic per (model, prompt) at temperature 0, shaped like sglang's (meta_info's
output_token_logprobs / output_top_logprobs triples); `drift=` must pass the gate and every `output=` corruption
must fail it, with `match=` honoured as for the other server knobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
import requests

from orchestrator.gates.correctness import Record, Thresholds, judge, parse_record
from orchestrator.inventory.models import CorrectnessGate
from orchestrator.resources import probes_dir

from .conftest import Server
from .standins import CtRoot, make_ct_root, with_userspace

GATE = CorrectnessGate()


def probe(srv: Server) -> Record:
    args = {"base": srv.url, "timeout": 30, "max_new_tokens": GATE.max_new_tokens, "top_logprobs": GATE.top_logprobs,
            "prompts": [p.model_dump(mode="json") for p in GATE.prompts], "release": "r"}
    out = subprocess.run([sys.executable, str(probes_dir() / "golden_probe.py"), json.dumps(args)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    data = json.loads(out.splitlines()[-1])
    assert data["error"] == ""
    record = parse_record({"version": 1, "answers": data["answers"]})
    assert record is not None
    return record


@pytest.fixture
def serve(tmp_path, start_server: Callable[..., Server]) -> Callable[..., Server]:
    ct: CtRoot = with_userspace(make_ct_root(tmp_path / "ct"))

    def start(*flags: str, **faults: object) -> Server:
        ct.set_state(**faults)
        srv = start_server(ct, "--tp", "8", *flags, start_s=0.2)
        assert srv.wait_status(200)[-1] == 200
        return srv

    return start


def test_answers_are_deterministic_and_shaped_like_sglang(serve: Callable[..., Server]) -> None:
    srv = serve()
    body = {"text": "The capital of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8},
            "return_logprob": True, "top_logprobs_num": 3, "return_text_in_logprobs": True}
    one, two = (requests.post(srv.url + "/generate", json=body, timeout=10).json() for _ in range(2))
    assert one["output_ids"] == two["output_ids"] and one["meta_info"]["output_top_logprobs"] == \
        two["meta_info"]["output_top_logprobs"]
    meta = one["meta_info"]
    lp, tid, text = meta["output_token_logprobs"][0]
    assert isinstance(lp, float) and lp < 0 and tid == one["output_ids"][0] and one["text"].startswith(text)
    assert [len(row) for row in meta["output_top_logprobs"]] == [3] * len(one["output_ids"])
    assert meta["output_top_logprobs"][0][0] == [lp, tid, text]  # greedy: the chosen token is the top one
    body["return_text_in_logprobs"] = False
    plain = requests.post(srv.url + "/generate", json=body, timeout=10).json()["meta_info"]
    assert plain["output_token_logprobs"][0][2] is None
    assert probe(srv) == probe(srv)


def test_drift_passes_and_every_corruption_fails(serve: Callable[..., Server]) -> None:
    reference = probe(serve())
    drifted = probe(serve(drift=0.05))
    assert drifted != reference
    assert judge(drifted, reference, Thresholds()).passed
    expected = {"garbage": "diverged", "zeros": "diverged", "nan": "diverged", "repeat": "diverged"}
    detectors = {"garbage": "control-chars", "zeros": "same-token", "nan": "missing-logprobs", "repeat": "repeat-run"}
    for output, kind in expected.items():
        answers = probe(serve(output=output))
        verdict = judge(answers, reference, Thresholds())
        kinds = {f.kind for f in verdict.findings}
        assert not verdict.passed and kind in kinds and detectors[output] in kinds, (output, kinds)
        assert not judge(answers, None, Thresholds()).passed  # the detectors alone catch it too


def test_output_fault_honours_match(serve: Callable[..., Server]) -> None:
    reference = probe(serve())
    other = probe(serve(output="garbage", match="--num-continuous-decode-steps 16"))
    assert judge(other, reference, Thresholds()).passed
    hit = probe(serve("--num-continuous-decode-steps", "16", output="garbage",
                      match="--num-continuous-decode-steps 16"))
    assert not judge(hit, reference, Thresholds()).passed


def test_sim_fault_refuses_an_unknown_output_and_a_drift_out_of_range(tmp_path) -> None:
    from simulator.manager.faults import set_ct_faults

    with pytest.raises(ValueError, match=r"unknown output fault 'bogus' \(known: ok, garbage, zeros, nan, repeat\)"):
        set_ct_faults(tmp_path, "sim-1", 120, output="bogus")
    with pytest.raises(ValueError, match="drift is a logprob change in nats between 0 and 1"):
        set_ct_faults(tmp_path, "sim-1", 120, drift="5")
