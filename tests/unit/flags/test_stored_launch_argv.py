"""Issue 50, item 7: a tune compares the running server's argv with the argv of the release's stored flags
(flags.json). A secret flag is stored as its reference, which canonicalize refuses as a value: every tune of a
profile with a secret flag stopped with exit 2 at its first bench. The stored flags must give the very argv the
unit starts sglang with (the secret in secrets.yaml, `--config` in argv)."""

from __future__ import annotations

from orchestrator.flags import canonicalize
from orchestrator.flags.schema import FlagSchema
from orchestrator.inventory.loader import load_inventory
from orchestrator.parsers.server_process import argv_difference
from orchestrator.render.service import SECRETS_PATH, launch_argv, public_flags, stored_launch_argv
from tests.shared import EXAMPLE_INVENTORY

SCHEMA = FlagSchema.load("0.5.12.post1")


def _profile():  # type: ignore[no-untyped-def]
    return next(iter(load_inventory(EXAMPLE_INVENTORY).profiles.values()))


def test_stored_flags_with_a_secret_give_the_argv_the_server_runs() -> None:
    prof = _profile()
    flags = canonicalize({**prof.flags, "admin-api-key": "tune-admin-secret-1"}, SCHEMA)
    running = launch_argv(prof, flags)  # what systemd starts (the unit's ExecStart, argv word for word)
    stored = public_flags(prof, flags)  # what flags.json holds
    assert stored["admin-api-key"] != "tune-admin-secret-1"
    expected = stored_launch_argv(prof, stored, SCHEMA)
    assert argv_difference(running, expected) is None
    assert "--config" in expected and SECRETS_PATH in expected
    assert not any("tune-admin-secret-1" in w for w in expected)


def test_another_flag_set_is_still_a_difference() -> None:
    prof = _profile()
    flags = canonicalize({**prof.flags, "admin-api-key": "tune-admin-secret-1"}, SCHEMA)
    other = canonicalize({**prof.flags, "admin-api-key": "tune-admin-secret-1", "max-running-requests": 7}, SCHEMA)
    diff = argv_difference(launch_argv(prof, other), stored_launch_argv(prof, public_flags(prof, flags), SCHEMA))
    assert diff is not None and "7" in diff
    # without any secret, no --config is expected
    plain = canonicalize(dict(prof.flags), SCHEMA)
    if prof.api_key is None:
        assert "--config" not in stored_launch_argv(prof, public_flags(prof, plain), SCHEMA)
