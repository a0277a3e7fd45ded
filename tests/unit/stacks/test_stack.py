"""Stacks as values (orchestrator/stacks.py): identity, the container's listing, what a prune may remove."""

from __future__ import annotations

from orchestrator.engine.state import ServerStatus
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.loader import load_inventory
from orchestrator.render.service import launch_argv, render_unit
from orchestrator.stacks.stack import (
    BudgetReport,
    DiskTally,
    Stack,
    StackRecord,
    StackSizes,
    budget_prune_plan,
    budget_refusal,
    build_command,
    estimate_stack_bytes,
    parse_stack_listing,
    parse_stack_sizes,
    parse_stack_usage,
    protected_stacks,
    prune_command,
    prune_plan,
    requirement,
    stack_sizes_script,
    stack_usage_command,
    venv_sizes,
)
from orchestrator.steps.locking import resolve_command
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


def pruned(plan_records: dict[str, StackRecord], keep: int, protected: set[str], sizes: StackSizes,
           budget: int | None) -> list[str]:
    return [r.sha for r in budget_prune_plan(plan_records, keep, protected, sizes, budget).stacks]


def test_a_budget_prunes_the_oldest_prunable_stacks_until_the_kept_ones_fit() -> None:
    records = budget_case()
    sizes = StackSizes({sha: 2 * GB for sha in records})  # 10 GB in all
    protected = {"111111111111", "444444444444"}  # e.g. the newest verified release's, the one just built
    # keep_stacks alone (4) prunes nothing; a budget of 7 GB prunes the oldest prunable ones (222…, then 333…).
    assert pruned(records, 4, protected, sizes, None) == []
    assert pruned(records, 4, protected, sizes, 8 * GB) == ["222222222222"]
    assert pruned(records, 4, protected, sizes, 7 * GB) == ["222222222222", "333333333333"]
    # Nothing more may go: never a protected stack nor the adopted venv, even over the budget.
    assert pruned(records, 4, protected, sizes, 1) == ["222222222222", "333333333333"]
    # The count's prune comes first, and the budget's adds to it only what is still needed.
    assert pruned(records, 1, {"444444444444"}, sizes, 9 * GB) == ["333333333333", "222222222222", "111111111111"]


def test_the_pip_cache_counts_against_the_budget_and_is_emptied_before_any_stack() -> None:
    """Issue 48 item 5: a real stack's pip run leaves ~4 GB of wheels in the pip cache; the budget counts them and
    empties that cache (only a cache) before it removes a stack."""
    records = budget_case()
    stacks = {sha: 2 * GB for sha in records}  # 10 GB of stacks
    protected = {"111111111111", "444444444444"}
    # The stacks fit 10 GB alone; with 4 GB of pip cache they do not: the cache goes, no stack.
    plan = budget_prune_plan(records, 4, protected, StackSizes(stacks, 4 * GB), 10 * GB)
    assert plan.pip_cache and plan.stacks == []
    # Within the budget with the cache: nothing goes.
    plan = budget_prune_plan(records, 4, protected, StackSizes(stacks, 4 * GB), 14 * GB)
    assert not plan.pip_cache and plan.stacks == []
    # Still over without the cache: the cache first, then the oldest prunable stack.
    plan = budget_prune_plan(records, 4, protected, StackSizes(stacks, 4 * GB), 8 * GB)
    assert plan.pip_cache and [r.sha for r in plan.stacks] == ["222222222222"]
    # An empty (or absent) cache is not emptied; no budget: only the count decides, the cache stays.
    assert not budget_prune_plan(records, 4, protected, StackSizes(stacks, 0), 8 * GB).pip_cache
    assert budget_prune_plan(records, 1, protected, StackSizes(stacks, 4 * GB), None).pip_cache is False
    # The command empties the cache before it removes any stack, and nothing else outside the stacks and caches.
    command = prune_command(plan.stacks, pip_cache=True)
    assert command.startswith("rm -rf /opt/deploy/stacks/.pip-cache && rm -f /opt/deploy/stacks/222222222222.json")
    assert prune_command([], pip_cache=True) == "rm -rf /opt/deploy/stacks/.pip-cache"


def test_the_sizes_read_the_pip_cache_beside_the_stacks() -> None:
    sizes = parse_stack_sizes("aaaaaaaaaaaa\t70233394\npip-cache\t4012345678\nbroken\tx\n\t12\n")
    assert sizes == StackSizes({"aaaaaaaaaaaa": 70233394}, 4012345678)
    assert parse_stack_sizes("aaaaaaaaaaaa\t5\n").pip_cache == 0
    assert "du -sb /opt/deploy/stacks/.pip-cache" in stack_sizes_script()


def test_what_the_budget_counted_pruned_and_kept_is_typed() -> None:
    report = BudgetReport(10 * GB, DiskTally.of({"bbbbbbbbbbbb": 6 * GB, "aaaaaaaaaaaa": 3 * GB}, 4 * GB),
                          DiskTally.of({"aaaaaaaaaaaa": 3 * GB}, 4 * GB), DiskTally.of({"bbbbbbbbbbbb": 6 * GB}, 0))
    doc = report.to_dict()
    assert doc["counted"] == {"stacks": [{"sha": "aaaaaaaaaaaa", "bytes": 3 * GB}, {"sha": "bbbbbbbbbbbb",
                                                                                   "bytes": 6 * GB}],
                              "pip_cache_bytes": 4 * GB, "total_bytes": 13 * GB}
    assert doc["pruned"]["total_bytes"] == 7 * GB and doc["kept"]["total_bytes"] == 6 * GB and doc["over"] is False
    assert report.kept_line() == ("kept stacks: bbbbbbbbbbbb 6,000,000,000 bytes; pip cache 0 bytes; "
                                  "6,000,000,000 bytes of a budget of 10,000,000,000")
    assert BudgetReport(GB, report.counted, DiskTally(), report.counted).over


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
    assert usage.sizes == StackSizes({"aaaaaaaaaaaa": 70233394}) and usage.verified_stack == "bbbbbbbbbbbb"
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
    assert pruned(records, 4, {"444444444444"}, StackSizes(sizes), 7 * GB) == ["111111111111", "222222222222"]


def test_the_lock_and_the_build_share_one_managed_pip_cache() -> None:
    """Issue 48 item 5: `deploy lock`'s resolution and the stack's build download into the same cache beside the
    stacks (what the lock fetched, the build reuses), never root's ~/.cache/pip."""
    stack = Stack("sglang==0.5.23", "0.5.23")
    for command in (resolve_command(stack), build_command(stack, stack.venv)):
        env, _, rest = command.partition(" PIP_CACHE_DIR=")[2].partition(" ")
        assert env == "/opt/deploy/stacks/.pip-cache" and rest.startswith("/"), command
        assert "/bin/pip install " in rest.split("&&")[0] and ".cache/pip" not in command
