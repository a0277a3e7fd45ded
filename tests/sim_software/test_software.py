"""Container software: NVIDIA installer stand-in, the venv's sglang version and pip shim."""

from __future__ import annotations

import os
import subprocess

from .conftest import SimHost


def run_in_ct(h: SimHost, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=h.env(ct=True), capture_output=True, text=True, timeout=30)


def test_installer_requires_no_kernel_modules_and_sets_version(host: SimHost) -> None:
    host.pass_devices()
    run_file = host.dir / "fs/root/NVIDIA-Linux-x86_64-595.58.03.run"
    assert os.access(run_file, os.X_OK)
    (host.ct / "fs/opt/sim-nvidia/version").write_text("580.95.05\n")
    assert host.run("nvidia-smi", ct=True).returncode == 18
    bad = run_in_ct(host, "sh", str(run_file), "--silent")
    assert bad.returncode == 1 and "ERROR: Installation has failed." in bad.stderr
    good = run_in_ct(host, "sh", str(run_file), "--silent", "--no-kernel-modules", "--no-drm")
    assert good.returncode == 0 and "Verifying archive integrity... OK" in good.stdout
    assert (host.ct / "fs/opt/sim-nvidia/version").read_text() == "595.58.03\n"
    assert host.run("nvidia-smi", "-L", ct=True).stdout.count("RTX PRO 6000") == 8


def test_venv_version_and_pip_shim(host: SimHost) -> None:
    venv = host.ct / "fs/root/ml-env"
    py = str(venv / "bin/python")
    assert run_in_ct(host, py, "-c", "import sglang; print(sglang.__version__)").stdout == "0.5.12.post1\n"
    assert "pip " in run_in_ct(host, str(venv / "bin/pip"), "--version").stdout
    bad = run_in_ct(host, str(venv / "bin/pip"), "install", "sglang==9.9")
    assert bad.returncode == 1 and "ERROR: No matching distribution found for sglang==9.9" in bad.stderr
    assert run_in_ct(host, str(venv / "bin/pip"), "install", "sglang==0.5.23").returncode == 0
    assert "Version: 0.5.23" in run_in_ct(host, str(venv / "bin/pip"), "show", "sglang").stdout
    r = run_in_ct(host, py, "-m", "sglang.launch_server", "--model-path", "/m", "--nsa-decode-backend", "trtllm")
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
    cfg = (host.ct / "fs/models/GLM-5-NVFP4/config.json").read_text()
    assert "GlmMoeDsaForCausalLM" in cfg
