"""The operator-side router venv is built once, under a lock, however many test processes want it at once."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from simulator import router


def test_two_builders_at_once_build_it_once_and_neither_empties_the_others(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router, "CACHE", tmp_path)
    builds: list[str] = []

    def fake_run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:3] == ["-m", "venv"]:  # `venv --clear` empties the directory
            venv = Path(argv[-1])
            shutil.rmtree(venv, ignore_errors=True)
            (venv / "bin").mkdir(parents=True)
            builds.append("venv")
        else:  # pip install: slow, then the package is there
            time.sleep(0.3)
            (Path(argv[0]).parent.parent / "sglang_router").mkdir()
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(router.subprocess, "run", fake_run)
    seen: list[bool] = []

    def use() -> None:
        venv = router.ensure_router_venv("9.9.9")
        seen.append((venv / "sglang_router").is_dir())

    threads = [threading.Thread(target=use) for _ in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=30)
    assert builds == ["venv"] and seen == [True, True, True]
