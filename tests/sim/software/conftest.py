"""Fixtures for the part-2 simulator tests: a provisioned host dir, the host's stand-in commands, a model server.

Nothing here needs part 1 (sshd, namespaces): the host's stand-ins run as plain subprocesses with env pointing at
a temporary host dir ($DEPLOY_SIM_HOST_DIR); a server "in a container" runs against a directory laid out like a
container root (standins.make_ct_root). Servers bind 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from simulator.software import provision_host

from .standins import CtRoot, clean_env

REPO = Path(__file__).resolve().parents[3]
SIM = REPO / "simulator"
STANDIN = SIM / "sglang_standin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SimHost:
    dir: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DEPLOY_SIM", "SGLANG_SIM"))}
        env["DEPLOY_SIM_HOST_DIR"] = str(self.dir)
        env.update(extra)
        return env

    def run(self, script: str, *args: str, timeout: float = 20, **extra: str) -> subprocess.CompletedProcess[str]:
        """One of the host's stand-ins (simulator/bin/host)."""
        return subprocess.run([str(SIM / "bin" / "host" / script), *args], env=self.env(**extra),
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def make_host(tmp_path: Path) -> Callable[..., SimHost]:
    def make(profile: str = "rtx-pro-6000-x8", time_scale: float = 4.0, **faults: Any) -> SimHost:
        host_dir = tmp_path / "root" / "hosts" / f"sim-{profile}"
        host_dir.mkdir(parents=True)
        cfg = {"gpu_profile": profile, "time_scale": time_scale, "faults": faults}
        (host_dir / "host.json").write_text(json.dumps(cfg))
        provision_host(host_dir, cfg)
        return SimHost(host_dir)

    return make


@pytest.fixture
def host(make_host: Callable[..., SimHost]) -> SimHost:
    return make_host()


class Server:
    def __init__(self, proc: subprocess.Popen[str], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_status(self, want: int, timeout: float = 15.0) -> list[int | None]:
        """Poll /health until `want`; returns every status seen (None = connection refused)."""
        seen: list[int | None] = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                code: int | None = requests.get(self.url + "/health", timeout=2).status_code
            except requests.ConnectionError:
                code = None
            if not seen or seen[-1] != code:
                seen.append(code)
            if code == want:
                return seen
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        return seen

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    procs: list[subprocess.Popen[str]] = []
    ports: set[int] = set()

    def start(ct: CtRoot | None, *flags: str, start_s: float = 0.5, version: str = "0.5.12.post1",
              env_extra: dict[str, str] | None = None, arch: str = "GlmMoeDsaForCausalLM") -> Server:
        """The server from the repo tree, in the "container" `ct` (faults, devices, GPU dir) or in none.

        Each server of a test gets a port no other server of that test had: a server that never binds its port
        (stuck in graph capture) leaves it free, and the kernel handed the same number to the next server, whose
        200 then answered for the stuck one (seen under load)."""
        port = free_port()
        while port in ports:
            port = free_port()
        ports.add(port)
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"architectures": [arch]}))
        (model / "model.safetensors").write_bytes(b"")  # the loader looks for weights files, not into them
        env = ct.env() if ct else clean_env()
        env.update(PYTHONPATH=str(STANDIN), SGLANG_SIM_START_S=str(start_s), SGLANG_SIM_VERSION=version,
                   SGLANG_SIM_CACHE_DIR=str(tmp_path / "kernel-cache"), **(env_extra or {}))
        log = tmp_path / f"server-{port}.log"
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
                "--port", str(port), *flags]
        with open(log, "w") as fh:
            proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
        procs.append(proc)
        return Server(proc, port, log)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
