"""Who owns a simulator root's site bridge (simulator.lxc.net.bridge_taken, pure): a name another root made, or a
leftover, is refused before `sim up` changes anything, with the owner and the command to run."""

from __future__ import annotations

from pathlib import Path

from simulator.lxc.net import bridge_name, bridge_taken

ROOT = Path("/var/lib/deploy-sim-b")
BRIDGE = bridge_name("1a2b3c")


def test_no_bridge_or_this_roots_own_is_free() -> None:
    assert bridge_taken(ROOT, BRIDGE, exists=False, recorded=False, owner=None) is None
    assert bridge_taken(ROOT, BRIDGE, exists=True, recorded=True, owner=str(ROOT)) is None
    assert bridge_taken(ROOT, BRIDGE, exists=True, recorded=True, owner=None) is None  # made before markers


def test_another_live_root_is_named_with_its_down_command(tmp_path: Path) -> None:
    other = tmp_path / "other-root"
    other.mkdir()
    for recorded in (False, True):
        err = bridge_taken(ROOT, BRIDGE, exists=True, recorded=recorded, owner=str(other))
        assert err is not None and f"simulator root {other} made it" in err.what and "nothing was created" in err.what
        assert f"`deploy sim down --root {other}`" in err.fix and "another --root" in err.fix


def test_a_leftover_says_where_it_came_from_and_how_to_remove_it(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    for owner, made in ((str(ROOT), "an earlier root at this path, removed without `deploy sim down`"),
                        (str(gone), f"root {gone}, which is gone"),
                        (None, "something else than this root")):
        err = bridge_taken(ROOT, BRIDGE, exists=True, recorded=False, owner=owner)
        assert err is not None and f"the site bridge {BRIDGE} of root {ROOT} already exists, left by {made}" in err.what
        assert f"`ip link del {BRIDGE}` and `nft delete table ip dsite_1a2b3c`" in err.fix
        assert "see docs/simulator.md" not in err.fix
