"""Issue 25 item 6: hints that fit the situation: no NCCL_P2P_LEVEL=SYS advice when the profile sets it, no
"roll back" advice after the roll rolled back by itself, and a --set error whose fix matches its problem."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.flags.flagset import apply_changes, parse_set
from orchestrator.inventory.loader import load_inventory
from orchestrator.p2p.verdict import p2p_verdict
from orchestrator.steps.release import rolled_back_fix
from orchestrator.verdicts.server_log import FATAL_PATTERNS
from tests.shared import EXAMPLE_INVENTORY
from tests.unit.p2p.test_verdict_p2p import load


def test_no_nccl_p2p_level_advice_when_the_profile_sets_it() -> None:
    topo, r, w = load("rtx-pro-6000-x8-bare")
    env = load_inventory(EXAMPLE_INVENTORY).profiles["glm5-nvfp4"].env
    assert env["NCCL_P2P_LEVEL"] == "SYS"
    v = p2p_verdict(topo, r, w, env=env)
    assert v.status == "warn" and not any("NCCL_P2P_LEVEL" in f for f in v.fixes)
    assert any("already sets NCCL_P2P_LEVEL=SYS" in reason for reason in v.reasons)
    bare = p2p_verdict(topo, r, w, env={"NCCL_IB_DISABLE": "1"})
    assert any("set NCCL_P2P_LEVEL=SYS" in f for f in bare.fixes)


@pytest.mark.parametrize("fix", [
    "read the journal excerpt; fix the flags or roll back (deploy rollback)",
    "look at the server journal (journalctl -u sglang in the container); roll back if a flag change caused it",
    *(p.fix for p in FATAL_PATTERNS if "roll back" in p.fix),
])
def test_after_the_automatic_rollback_no_fix_says_roll_back(fix: str) -> None:
    after = rolled_back_fix(fix, "20261130T030547-f040fd49")
    assert "roll back (" not in after and ", or roll back" not in after and "roll back if" not in after
    assert after.endswith("the roll already put the host back on 20261130T030547-f040fd49, so there is nothing "
                          "to roll back")


def set_error(item: str) -> ConfigError:
    schema = FlagSchema.load("0.5.12.post1")
    with pytest.raises(ConfigError) as err:
        apply_changes(canonicalize({"tp-size": 8}, schema), parse_set([item], schema))
    return err.value


def test_a_set_value_of_the_wrong_type_names_the_type() -> None:
    err = set_error("max-running-requests=abc")
    assert "--max-running-requests: takes an integer, got 'abc' (type int in sglang 0.5.12.post1's flag schema)" \
        in err.what
    assert "rename" not in err.fix and "value of the type" in err.fix


def test_a_set_without_equals_says_to_write_key_value() -> None:
    err = set_error("max-running-requests")
    assert "needs a value: write max-running-requests=VALUE" in err.what
    assert "rename" not in err.fix and err.fix.startswith("write each --set as KEY=VALUE")


def test_a_misspelt_set_flag_still_says_rename() -> None:
    err = set_error("max-runing-requests=4")
    assert "did you mean --max-running-requests" in err.what and err.fix.startswith("rename or remove")


def test_a_fix_without_roll_back_advice_is_kept_as_it_is() -> None:
    fix = "re-run the command; every step is idempotent and resumes where it stopped"
    assert rolled_back_fix(fix, "R") == fix


def test_the_bench_wait_bound_follows_the_preset() -> None:
    """Issue 25 item 19: a 64-prompt `quick` bench said "up to 1920 s" (timeout_s + 120 for every preset)."""
    from orchestrator.bench.run import SETUP_S, bench_limit_s
    from orchestrator.inventory.models import REQUEST_START_S, SLOW_TPOT_S

    presets = load_inventory(EXAMPLE_INVENTORY).presets
    quick = presets["quick"]  # 64 prompts, 64 output tokens, rate inf, no concurrency cap, 1 warmup request
    per_request = REQUEST_START_S + SLOW_TPOT_S * 64
    assert bench_limit_s(quick) == 2 * per_request + SETUP_S < 400
    # more waves (a concurrency cap) and a finite rate (arrival time) lengthen it
    c256 = presets["seed-c256"]  # 1024 prompts at most 256 at once: 4 waves + warmup
    assert bench_limit_s(c256) == 5 * (REQUEST_START_S + SLOW_TPOT_S * 256) + SETUP_S
    paced = quick.model_copy(update={"request_rate": 1.0})
    assert bench_limit_s(paced) == bench_limit_s(quick) + 64
    # a preset that sets timeout_s gets exactly it; an estimate never passes the default cap
    assert bench_limit_s(quick.model_validate({**quick.model_dump(), "timeout_s": 900})) == 900 + SETUP_S
    huge = quick.model_validate({**quick.model_dump(), "num_prompts": 100000, "max_concurrency": 1})
    assert bench_limit_s(huge) == 1800 + SETUP_S
