"""The correctness gate end to end (docs/gates.md): the real CLI over SSH against one converged simulated host.

`up` records the first release's golden answers; a roll whose server drifts slightly (drift=) passes and records
its own; a roll whose server answers garbage is caught by the gate, named ("correctness", the prompt, the token
position) and rolled back; `deploy check` passes on the healthy release and, once its server answers NaN, fails
naming the same, changing nothing.
"""

from __future__ import annotations

import json
import re

from tests.e2e.conftest import DeployEnv
from tests.e2e.test_roll import by_id, ct_out, current, health, history, release_ids

RELEASES = "/var/lib/deploy/releases"


def golden(env: DeployEnv, release: str) -> dict:
    return json.loads(ct_out(env, f"cat {RELEASES}/{release}/golden.json"))


def test_gate_keeps_drift_rolls_back_garbage_and_check_reports(converged: DeployEnv) -> None:
    env = converged
    base = current(env)
    first = golden(env, base)  # `up` recorded the first release's answers (no reference yet: detectors only)
    assert {a["name"] for a in first["answers"]} >= {"arithmetic", "long-context"}
    assert all(len(a["ids"]) > 0 and len(a["top"]) == len(a["ids"]) for a in first["answers"])

    ok = env.run("--json", "check", "host", env.host)
    assert ok.rc == 0, ok.text
    assert ok.json["correctness"]["passed"] and ok.json["correctness"]["reference"] == base

    # Drift (batched-kernel nondeterminism) on the candidate's server: within the thresholds, the roll is kept.
    env.ct_faults(drift=0.05, match="--num-continuous-decode-steps 4")
    res = env.run("--json", "roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench")
    assert res.rc == 0, res.text
    drifted = res.json["release"]
    assert current(env) == drifted and golden(env, drifted)["answers"] != first["answers"]
    assert golden(env, drifted)["answers"][0]["ids"] == first["answers"][0]["ids"]

    # Garbage from the next candidate: caught, named, rolled back to the drifted release.
    env.ct_faults(drift=0, output="garbage", match="--max-running-requests 64")
    res = env.run("--json", "roll", "host", env.host, "--set", "max-running-requests=64", "--skip-bench")
    assert res.rc == 1, res.text
    err = res.json
    assert err["step"] == "correctness"
    assert re.search(r"correctness gate: prompt 'arithmetic' at token 0: answers diverged", err["what"]), err["what"]
    assert f"rolled back to {drifted}" in err["what"]
    cand = err["details"]["candidate"]
    assert current(env) == drifted and health(env) == "200"
    verdict = by_id(history(env))[cand]["verdict"]
    assert verdict["verdict"] == "rolled-back" and verdict["failed_step"] == "correctness"
    assert golden(env, cand)["answers"][0]["ids"] != first["answers"][0]["ids"]  # the evidence stays with it

    # The running server goes bad (NaN logits) without any roll: `deploy check` says so and changes nothing.
    before = release_ids(env)
    env.ct_faults(output="nan", match=None)
    ct_out(env, "systemctl restart sglang && for i in $(seq 100); do "
                "curl -sf -o /dev/null http://127.0.0.1:8000/health && break; sleep 0.2; done")
    bad = env.run("check", "host", env.host)
    assert bad.rc == 1, bad.text
    assert re.search(r"correctness gate: prompt 'arithmetic' at token 0: answers diverged", bad.stderr), bad.text
    assert "no logprob for the token" in bad.stderr or "+" in bad.stderr
    assert release_ids(env) == before and current(env) == drifted
