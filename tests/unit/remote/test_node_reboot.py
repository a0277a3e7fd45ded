"""Rebooting a node (remote/node.py): `systemctl reboot` whose connection drops before its exit status is a reboot
under way; an answer with the old boot id is the node still shutting down; the node is back only with a new boot
id; a refused reboot and a node that never comes back are RemoteErrors that say what to do. The node here is a
scripted stand-in for the SSH adapter's `run`/`close` (the real path is tests/e2e/test_fleet_roll.py's watch)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from orchestrator.errors import RemoteError
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Host
from orchestrator.remote.node import reboot_node
from orchestrator.remote.ssh import RemoteResult
from tests.shared import EXAMPLE_INVENTORY


@dataclass
class Node:
    """Answers in order: boot ids (str), a drop (None), or the reboot's exit status (int)."""

    host: Host
    script: list[str | int | None]
    sent: list[str] = field(default_factory=list)
    closed: int = 0

    def run(self, command: str, **_kw: object) -> RemoteResult:
        self.sent.append(command)
        answer = self.script.pop(0) if self.script else None
        if answer is None:
            raise RemoteError(f"SSH connection to {self.host.address} dropped during {command}")
        if isinstance(answer, int):
            return RemoteResult(answer, "", "Failed to reboot: Access denied" if answer else "", 0.0)
        return RemoteResult(0, answer + "\n", "", 0.0)

    def close(self) -> None:
        self.closed += 1


def _node(*script: str | int | None) -> Node:
    return Node(load_inventory(EXAMPLE_INVENTORY).hosts["pve-gpu-1"], list(script))


def test_a_drop_then_the_old_boot_then_a_new_one() -> None:
    node = _node("boot-a", None, None, "boot-a", "boot-b")  # reboot drops; down; still shutting down; back
    old, new, _took = reboot_node(node, timeout_s=60, say=lambda _s: None, sleep=lambda _s: None)  # type: ignore[arg-type]
    assert (old, new) == ("boot-a", "boot-b")
    assert node.sent[1] == "systemctl reboot" and node.script == []


def test_a_refused_reboot_is_said() -> None:
    with pytest.raises(RemoteError, match=r"`systemctl reboot` was refused \(exit 1\): Failed to reboot"):
        reboot_node(_node("boot-a", 1), timeout_s=60, say=lambda _s: None, sleep=lambda _s: None)  # type: ignore[arg-type]


def test_a_node_that_does_not_come_back() -> None:
    node = _node("boot-a", 0, *["boot-a"] * 1000)
    with pytest.raises(RemoteError, match="did not come back from its reboot within 0 s") as err:
        reboot_node(node, timeout_s=0.0, say=lambda _s: None, sleep=lambda _s: None)  # type: ignore[arg-type]
    assert "reboot_timeout_s" in err.value.fix
