from datetime import UTC, datetime

from orchestrator.parsers.pve import parse_config_json, parse_pct_status, parse_property_string
from orchestrator.releases.store import (
    current_release,
    new_release_id,
    parse_release_ids,
    parse_release_lines,
    unique_release_id,
)
from orchestrator.remote.container import Container


def test_release_ids_sort_by_time_and_carry_the_bundle_hash():
    a = new_release_id("ab" * 32, datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC))
    b = new_release_id("cd" * 32, datetime(2026, 11, 30, 3, 0, 0, tzinfo=UTC))
    assert a == "20261130T020000-abababab"
    assert parse_release_ids(f"{b}\n{a}\nnot-a-release\n{a}.partial\n") == [a, b]


def test_every_install_gets_a_new_id_even_for_content_seen_before():
    when = datetime(2026, 11, 30, 2, 0, 0, tzinfo=UTC)
    a = new_release_id("ab" * 32, when)
    assert unique_release_id("ab" * 32, [], when) == a
    # Same content, same second: the next free second, so the earlier attempt keeps its directory and verdict.
    b = unique_release_id("ab" * 32, [a], when)
    assert b == "20261130T020001-abababab" and parse_release_ids(f"{b}\n{a}\n") == [a, b]
    assert unique_release_id("ab" * 32, [a, b], when) == "20261130T020002-abababab"


def test_current_release_from_readlink():
    assert current_release("releases/20261130T020000-abababab\n") == "20261130T020000-abababab"
    assert current_release("") is None
    assert current_release("/somewhere/else") is None


def test_release_lines_skip_garbage():
    rows = parse_release_lines('{"current":"x"}\n{"id":"a","meta":null}\nnot json\n')
    assert rows == [{"current": "x"}, {"id": "a", "meta": None}]


def test_container_script_refuses_its_own_terminator():
    import pytest

    ct = Container(node=None, vmid=120)  # type: ignore[arg-type]  # builders only: no node needed
    with pytest.raises(ValueError):
        ct.script_command("echo DEPLOY_CT_EOF\n")
    assert ct.script_command("true\n").startswith("pct exec 120 -- bash -s <<'DEPLOY_CT_EOF'")


def test_pve_parsers():
    assert parse_pct_status("status: running\n") == "running"
    assert parse_pct_status("Configuration file 'nodes/x/lxc/120.conf' does not exist\n") is None
    conf = parse_config_json('{"data": {"dev0": "/dev/nvidia0,mode=0666", "digest": "abc"}}')
    assert conf["digest"] == "abc"
    assert parse_property_string("/dev/nvidia0,mode=0666", "path") == {"path": "/dev/nvidia0", "mode": "0666"}
