"""The release's kernel cache, as the steps see it: which directory a release gets, the check before each start and
what it found (orchestrator/caches.py has the pure parts; the check itself runs in the activation's round trip)."""

from __future__ import annotations

from orchestrator.engine.step import StepContext
from orchestrator.flags import FlagSet
from orchestrator.layout import PATHS
from orchestrator.releases.documents import CacheMeta
from orchestrator.stacks.kernel_caches import (
    OWN_CACHE_VAR,
    CacheCheck,
    CacheShape,
    cache_dir,
    cache_key,
    check_shell,
    manifest,
)
from orchestrator.steps.software import server_stack


def release_cache(ctx: StepContext, flags: FlagSet) -> CacheMeta | None:
    """The kernel cache of a release with `flags` on the stack this run serves with; None when the profile's env
    points the caches somewhere itself (SGLANG_CACHE_DIR): the operator's own directory is left alone."""
    if OWN_CACHE_VAR in ctx.profile.env:
        return None
    stack = server_stack(ctx)
    shape = CacheShape.from_flags(ctx.profile.model_path, flags.values)
    key = cache_key(stack.sha, stack.venv, shape)
    return CacheMeta(dir=cache_dir(key), key=key, manifest=manifest(key, stack.sha, stack.venv, shape))


def pre_start_check() -> str:
    """The check the activation script runs before the server starts, on the release it made current."""
    return check_shell(f"{PATHS.current_link}/meta.json")


def note_cache(ctx: StepContext, check: CacheCheck | None) -> None:
    """Keep what the check before this start found (the boot ledger records it); a cache set aside, or one that
    could not be checked, is said in the command's output."""
    ctx.state.server.cache = check
    if check is not None and check.state in ("set-aside", "unchecked"):
        ctx.say(check.line())
