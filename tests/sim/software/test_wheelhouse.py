"""The wheelhouse serves every template release's Python (Debian 12: 3.11, Debian 13: 3.13), downloaded once each.

pip is replaced by a recorder here (the download itself is real in tests/sim/software/test_index.py and every
end-to-end test): what matters is which Python each download is for, and that a wheelhouse filled for 3.11 alone
(by an older checkout) is topped up for 3.13 without being downloaded again for 3.11.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from simulator.software import wheelhouse


def _recording_pip(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        version = cmd[cmd.index("--python-version") + 1]
        calls.append(version)
        tag = "cp" + version.replace(".", "")
        (Path(cmd[cmd.index("-d") + 1]) / f"pyyaml-6.0-{tag}-{tag}-manylinux2014_x86_64.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wheelhouse.subprocess, "run", run)
    monkeypatch.setattr(wheelhouse, "build_standin_wheels", lambda path: None)
    return calls


def test_wheelhouse_holds_wheels_for_each_releases_python(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _recording_pip(monkeypatch)
    assert wheelhouse.TARGET_PYTHONS == ("3.11", "3.13")
    wh = wheelhouse.fill(tmp_path / "wh")
    assert calls == ["3.11", "3.13"] and wh.downloaded
    assert {p.name for p in wh.wheels} == {"pyyaml-6.0-cp311-cp311-manylinux2014_x86_64.whl",
                                           "pyyaml-6.0-cp313-cp313-manylinux2014_x86_64.whl"}
    again = wheelhouse.fill(tmp_path / "wh")
    assert calls == ["3.11", "3.13"] and not again.downloaded  # both markers hold


def test_a_wheelhouse_filled_for_311_only_is_topped_up_for_313(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    calls = _recording_pip(monkeypatch)
    path = tmp_path / "wh"
    path.mkdir()
    # what an older checkout writes: the 3.11 marker alone, under the name it always had
    (path / ".filled.json").write_text(json.dumps({"requirements": wheelhouse.requirements(), "python": "3.11"}))
    wheelhouse.fill(path)
    assert calls == ["3.13"]
    assert json.loads((path / ".filled.json").read_text())["python"] == "3.11"  # still valid for the older one
    assert json.loads((path / ".filled-3.13.json").read_text())["python"] == "3.13"


def test_download_command_asks_for_binary_wheels_of_one_python() -> None:
    cmd = wheelhouse.download_command(Path("/x"), "3.13")
    assert cmd[cmd.index("--python-version") + 1] == "3.13" and "--only-binary=:all:" in cmd
