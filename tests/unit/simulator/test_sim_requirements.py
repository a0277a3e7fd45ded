"""`sim up` names every program it needs and the package that has it, before it starts anything."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from simulator.lxc import runtime


def test_a_missing_dnsmasq_is_named_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which
    monkeypatch.setattr(runtime.shutil, "which", lambda t: None if t == "dnsmasq" else real(t) or f"/usr/bin/{t}")
    with pytest.raises(runtime.MissingTools) as err:
        runtime.require_lxc()
    assert "dnsmasq" in str(err.value) and "apt-get install dnsmasq-base)" in str(err.value)


def test_every_tool_has_its_package_and_install_sh_installs_it() -> None:
    install = (Path(__file__).resolve().parents[3] / "scripts" / "install.sh").read_text()
    for tool, package in runtime.REQUIRED_TOOLS.items():
        assert f"{tool}:{package}" in install or package in install, (tool, package)
