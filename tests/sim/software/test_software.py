"""The NVIDIA installer stand-in on the host itself (its container side: test_nvrun.py)."""

from __future__ import annotations

import os
import subprocess

from .conftest import SimHost


def test_installer_on_the_host_refuses_while_the_module_is_loaded(host: SimHost) -> None:
    """Outside a container the loaded, in-use `nvidia` module makes the real installer fail, flags or not."""
    run_file = host.dir / "fs/root/NVIDIA-Linux-x86_64-595.58.03.run"
    assert os.access(run_file, os.X_OK)
    for flags in (["--silent"], ["--silent", "--no-kernel-modules", "--no-drm"]):
        res = subprocess.run(["sh", str(run_file), *flags], env=host.env(), capture_output=True, text=True,
                             timeout=30)
        assert res.returncode == 1, flags
        assert "Verifying archive integrity... OK" in res.stdout
        assert "appears to already be loaded in your kernel" in res.stderr
        assert "ERROR: Installation has failed." in res.stderr
