"""Stacks as values (orchestrator/stacks.py): identity, the container's listing, what a prune may remove."""

from __future__ import annotations

from orchestrator.engine.state import ServerStatus
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.loader import load_inventory
from orchestrator.render.service import launch_argv, render_unit
from orchestrator.stacks.stack import (
    Stack,
    StackRecord,
    budget_prune_plan,
    budget_refusal,
    estimate_stack_bytes,
    parse_stack_listing,
    parse_stack_usage,
    protected_stacks,
    prune_command,
    prune_plan,
    requirement,
    stack_usage_command,
    venv_sizes,
)
from tests.shared import EXAMPLE_INVENTORY


def built(sha: str, at: str) -> StackRecord:
    return StackRecord(sha, f"/opt/deploy/stacks/{sha}", "0.5.23", "sglang==0.5.23", False, at, "0.5.23")


def test_identity_covers_the_pin_the_extras_and_the_index() -> None:
    base = Stack(requirement("0.5.23", []), "0.5.23")
    assert base.sha == Stack("sglang==0.5.23", "0.5.23").sha and len(base.sha) == 12
    assert base.venv == f"/opt/deploy/stacks/{base.sha}"
    others = {Stack(requirement("0.5.12.post1", []), "0.5.12.post1").sha,
              Stack(requirement("0.5.23", ["srt"]), "0.5.23").sha,
              Stack("sglang==0.5.23", "0.5.23", " --index-url http://10.9.0.2:8080/simple/").sha}
    assert base.sha not in others and len(others) == 3
    assert requirement("0.5.23", ["srt", "blackwell"]) == "sglang[srt,blackwell]==0.5.23"


def test_the_listing_trusts_only_a_venv_whose_sglang_matches_its_record() -> None:
    good, gone = built("aaaaaaaaaaaa", "2026-12-01"), built("bbbbbbbbbbbb", "2026-12-02")
    text = (f"{good.record_json()}\t0.5.23\n{gone.record_json()}\t\nnot json\t0.5.23\n"
            '{"venv": "/x"}\t0.5.23\n')
    records = parse_stack_listing(text)
    assert sorted(records) == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    assert records["aaaaaaaaaaaa"].usable and not records["bbbbbbbbbbbb"].usable
    assert records["aaaaaaaaaaaa"] == good


def test_a_prune_keeps_the_newest_and_never_the_current_the_verified_or_an_adopted_venv() -> None:
    adopted = StackRecord("000000000000", "/root/ml-env", "0.5.12.post1", "sglang==0.5.12.post1", True, "2026-11-01",
                          "0.5.12.post1")
    records = {r.sha: r for r in (adopted, built("111111111111", "2026-12-01"), built("222222222222", "2026-12-02"),
                                  built("333333333333", "2026-12-03"), built("444444444444", "2026-12-04"))}
    releases = [{"current": "R3"},
                {"id": "R1", "meta": {"stack": {"sha": "111111111111"}}, "verdict": {"verdict": "kept"}},
                {"id": "R2", "meta": {"stack": {"sha": "222222222222"}}, "verdict": {"verdict": "kept"}},
                {"id": "R3", "meta": {"stack": {"sha": "333333333333"}}, "verdict": {"verdict": "rolled-back"}},
                {"id": "R4", "meta": {}, "verdict": None}]
    protected = protected_stacks(releases, "R3")
    assert protected == {"333333333333", "222222222222"}  # the current one, the newest verified one
    doomed = prune_plan(records, keep=1, protected=protected)
    assert [r.sha for r in doomed] == ["111111111111"]
    assert prune_plan(records, keep=4, protected=set()) == []
    command = prune_command([*doomed, adopted])
    assert command == ("rm -f /opt/deploy/stacks/111111111111.json && rm -rf /opt/deploy/stacks/111111111111 "
                       "/var/cache/deploy/kernels/111111111111-*")


GB = 1_000_000_000


def budget_case() -> dict[str, StackRecord]:
    adopted = StackRecord("000000000000", "/root/ml-env", "0.5.12.post1", "sglang==0.5.12.post1", True, "2026-11-01",
                          "0.5.12.post1")
    return {r.sha: r for r in (adopted, built("111111111111", "2026-12-01"), built("222222222222", "2026-12-02"),
                               built("333333333333", "2026-12-03"), built("444444444444", "2026-12-04"))}


def test_a_budget_prunes_the_oldest_prunable_stacks_until_the_kept_ones_fit() -> None:
    records = budget_case()
    sizes = {sha: 2 * GB for sha in records}  # 10 GB in all
    protected = {"111111111111", "444444444444"}  # e.g. the newest verified release's, the one just built
    # keep_stacks alone (4) prunes nothing; a budget of 7 GB prunes the oldest prunable ones (222…, then 333…).
    assert budget_prune_plan(records, 4, protected, sizes, None) == []
    assert [r.sha for r in budget_prune_plan(records, 4, protected, sizes, 8 * GB)] == ["222222222222"]
    assert [r.sha for r in budget_prune_plan(records, 4, protected, sizes, 7 * GB)] == ["222222222222",
                                                                                         "333333333333"]
    # Nothing more may go: never a protected stack nor the adopted venv, even over the budget.
    assert [r.sha for r in budget_prune_plan(records, 4, protected, sizes, 1)] == ["222222222222", "333333333333"]
    # The count's prune comes first, and the budget's adds to it only what is still needed.
    assert [r.sha for r in budget_prune_plan(records, 1, {"444444444444"}, sizes, 9 * GB)] == [
        "333333333333", "222222222222", "111111111111"]


def test_a_stack_that_cannot_fit_the_budget_even_after_pruning_is_refused_naming_the_sizes() -> None:
    records = budget_case()
    sizes = {"000000000000": 3 * GB, "111111111111": 2 * GB, "222222222222": 5 * GB, "333333333333": 2 * GB}
    new = Stack("sglang==0.5.23", "0.5.23", " --index-url http://10.9.0.2/simple")  # same requirement, another sha
    assert estimate_stack_bytes(new, records, sizes) == (5 * GB, "estimated from stack 222222222222 of the same "
                                                                 "requirement")
    other = Stack("sglang==0.6.0", "0.6.0")
    assert estimate_stack_bytes(other, records, {"000000000000": 3 * GB, "111111111111": 2 * GB}) == (
        3 * GB, "estimated from the largest kept stack, 000000000000")
    assert estimate_stack_bytes(other, records, {}) is None
    # Never pruned: the adopted venv (3 GB) and the current release's stack (2 GB); the new one about 5 GB.
    assert budget_refusal(new, records, sizes, {"111111111111"}, 10) is None
    why = budget_refusal(new, records, sizes, {"111111111111"}, 9.5)
    assert why == (f"stack {new.sha} (sglang==0.5.23) needs about 5,000,000,000 bytes (estimated from stack "
                   "222222222222 of the same requirement); with the stacks that are never pruned (000000000000 "
                   "3,000,000,000 bytes, 111111111111 2,000,000,000 bytes) the stacks would take 10,000,000,000 "
                   "bytes, over stacks_disk_budget_gb 9.5 (9,500,000,000 bytes) even after pruning every other "
                   "stack; nothing was changed")


def test_the_usage_fact_reads_sizes_and_the_newest_verified_release_stack() -> None:
    text = ('aaaaaaaaaaaa\t70233394\nbroken\tx\n__DEPLOY_VERIFIED_META__\n'
            '{"stack": {"sha": "bbbbbbbbbbbb", "venv": "/opt/deploy/stacks/bbbbbbbbbbbb"}}\n')
    usage = parse_stack_usage(text)
    assert usage.sizes == {"aaaaaaaaaaaa": 70233394} and usage.verified_stack == "bbbbbbbbbbbb"
    assert parse_stack_usage("__DEPLOY_VERIFIED_META__\n").verified_stack is None
    assert "du -sb" in stack_usage_command() and "'/opt/deploy/stacks'" not in stack_usage_command()


def test_the_unit_runs_the_interpreter_of_the_release_stack() -> None:
    inv = load_inventory(EXAMPLE_INVENTORY)
    profile = inv.profile_for(next(iter(inv.hosts.values())))
    flags = canonicalize(profile.flags, FlagSchema.load(profile.sglang_version))
    venv = "/opt/deploy/stacks/0123456789ab"
    unit = render_unit(profile, flags, venv=venv).content
    assert f"ExecStart={venv}/bin/python -m sglang.launch_server" in unit
    assert f"ExecStart={profile.venv}/bin/python " in render_unit(profile, flags).content
    assert launch_argv(profile, flags, venv=venv)[0] == f"{venv}/bin/python"


def test_status_never_reads_kept_of_a_server_that_is_down() -> None:
    """Issue 35 item 1: `release R (kept, up, T), sglang activating, /health 000` read as a healthy release."""
    up = ServerStatus(container="running", release="R", active="active", health="200", verdict="kept",
                      release_source="up", release_created="T")
    assert up.serving and up.release_line() == "release R (kept, up, T), sglang active, /health 200"
    down = ServerStatus(container="running", release="R", active="activating", health="000", verdict="kept",
                        release_source="up", release_created="T")
    assert not down.serving and "(kept, up" not in down.release_line()
    assert down.release_line() == ("release R is NOT SERVING (sglang activating, /health 000); its verdict was kept "
                                   "(installed by up at T)")
    assert down.to_dict()["serving"] is False


def test_a_venv_recorded_under_two_shas_counts_once_against_the_budget() -> None:
    records = budget_case()
    twin = StackRecord("999999999999", "/root/ml-env/", "0.5.12.post1", "sglang==0.5.12.post1", True, "2026-11-01",
                       "0.5.12.post1")  # a site template's record of the same venv
    records[twin.sha] = twin
    sizes = {sha: 2 * GB for sha in records}
    assert venv_sizes(records, sizes) == {sha: 2 * GB for sha in records if sha != twin.sha}
    assert [r.sha for r in budget_prune_plan(records, 4, {"444444444444"}, sizes, 7 * GB)] == ["111111111111",
                                                                                                "222222222222"]
