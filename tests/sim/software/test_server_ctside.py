"""The sglang stand-in inside a real container: it reads the world only through the ctside mounts, binds its
port after the model load, and /health generates for at least 1 s of model time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from simulator import ctside
from simulator.software.hub import MODEL_CONFIG

from .conftest import STANDIN, free_port
from .standins import CtRoot, loopback, make_ct_root, sglang_venv, with_userspace


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "GLM-5-NVFP4"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (path / "model.safetensors").write_bytes(b"")  # the loader looks for weights files, not into them
    return path


class Launch:
    def __init__(self, tmp_path: Path, model: Path) -> None:
        self.tmp_path, self.model, self.procs = tmp_path, model, []

    def __call__(self, ct: CtRoot, python: str | None = None, start_s: float = 1.0,
                 ) -> tuple[subprocess.Popen[str], str, Path]:
        port = free_port()
        log = self.tmp_path / f"server-{port}.log"
        env = ct.env(SGLANG_SIM_START_S=str(start_s))
        if python is None:  # the repo tree (the ctside module is then found next to it)
            python, env["PYTHONPATH"] = sys.executable, str(STANDIN)
        argv = [python, "-m", "sglang.launch_server", "--model-path", str(self.model), "--host", loopback(),
                "--port", str(port), "--tp", "8"]
        with open(log, "w") as fh:
            proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        return proc, f"http://{loopback()}:{port}", log


@pytest.fixture
def launch(tmp_path: Path, model: Path) -> Iterator[Launch]:
    launcher = Launch(tmp_path, model)
    yield launcher
    for proc in launcher.procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def test_wheel_server_binds_after_load_and_health_takes_a_model_second(tmp_path: Path, launch: Launch) -> None:
    ct = with_userspace(make_ct_root(tmp_path / "ct", time_scale=4.0))
    proc, url, log = launch(ct, python=sglang_venv().bin("python"), start_s=1.5)
    refused_while_loading = False
    deadline = time.monotonic() + 30
    status = None
    while time.monotonic() < deadline and proc.poll() is None:
        loaded = "Load weight end." in log.read_text()
        try:
            status = requests.get(url + "/health", timeout=5).status_code
        except requests.ConnectionError:
            refused_while_loading = refused_while_loading or loaded
            status = None
        if status is not None:
            assert "Capture target decode CUDA graph end." in log.read_text()  # (0.5.23) the port opened after the load
        if status == 200:
            break
        time.sleep(0.05)
    assert status == 200, log.read_text()
    assert refused_while_loading, "the port should stay closed while weights load"
    t0 = time.monotonic()
    assert requests.get(url + "/health", timeout=10).status_code == 200
    assert time.monotonic() - t0 >= 1.0 / 4.0  # 1 s of model time at time_scale 4
    load = json.loads((ct.sim / "gpu" / "load-120.json").read_text())
    assert load["vmid"] == 120 and load["minors"] == list(range(8))
    assert "0.5.23" in requests.get(url + "/server_info", timeout=5).text


@pytest.mark.parametrize(("userspace", "message"), [
    ("575.57.08", "Error 803: system has unsupported display driver / cuda driver combination"),
    (None, "RuntimeError: Found no NVIDIA driver on your system"),
])
def test_driver_problems_fail_like_cuda(tmp_path: Path, launch: Launch, userspace: str | None,
                                        message: str) -> None:
    ct = with_userspace(make_ct_root(tmp_path / "ct"), userspace)
    proc, _, log = launch(ct)
    assert proc.wait(30) == 1
    assert message in log.read_text()


def test_faults_and_devices_come_from_the_ctside_mounts(tmp_path: Path, launch: Launch) -> None:
    ct = with_userspace(make_ct_root(tmp_path / "ct", minors=[0, 1]))
    proc, _, log = launch(ct)
    assert proc.wait(30) == 1 and "tp_size=8 but only 2 GPUs are visible" in log.read_text()
    ct = with_userspace(make_ct_root(tmp_path / "ct2"))
    ct.set_state(crash_on_start=True)
    proc, _, log = launch(ct, start_s=0.3)
    assert proc.wait(30) == 1 and "an illegal memory access was encountered" in log.read_text()


def test_only_the_ctside_mounts_make_a_container(tmp_path: Path) -> None:
    """Host variables of this machine's environment do not make a container; the ctside vmid file does."""
    ct = make_ct_root(tmp_path / "ct")
    probe = "from sglang._sim import env; print(env.real_container(), env.vmid(), env.host_config() != {})"
    env = ct.env(PYTHONPATH=str(STANDIN), DEPLOY_SIM_HOST_DIR=str(tmp_path / "nohost"), DEPLOY_SIM_CT="7")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["True", "120", "True"], out.stderr
    (ct.root / ctside.VMID_FILE.lstrip("/")).unlink()
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=30)
    assert out.stdout.split() == ["False", "None", "False"], out.stderr
    assert os.environ.get("DEPLOY_SIM_CT_ROOT") is None
