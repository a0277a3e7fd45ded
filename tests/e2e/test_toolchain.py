"""The toolchain a real first start compiles with (issue 48 item 2), through the real CLI on a simulated host.

`up` installed the compilers and headers (real apt in the container); the stand-in stack carries no nvcc, so `plan`'s
text names nvcc as missing, with its fix. Then the current stack gets its own nvcc where sglang 0.5.23's
nvidia-cuda-nvcc puts it (`site-packages/nvidia/cu13/bin`, a stand-in file): `doctor` counts it, and `up` renders
the unit with `CUDA_HOME` set to it, restarts, and the server runs with it in its environment, PATH unchanged.
"""

from __future__ import annotations

import json

from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stack_roll import health


def stack_venv(env: DeployEnv) -> str:
    meta = json.loads(env.ct("cat /var/lib/deploy/current/meta.json").stdout)
    return str(meta["stack"]["venv"])


def server_environ(env: DeployEnv) -> dict[str, str]:
    pid = env.ct("systemctl show -p MainPID --value sglang").stdout.strip()
    pairs = env.ct(f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout.splitlines()
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def test_plan_names_the_missing_nvcc_and_a_stacks_own_nvcc_becomes_the_servers_cuda_home(converged: DeployEnv) -> None:
    env = converged
    plan = env.run("plan", "host", env.host)
    assert plan.rc == 0, plan.text[-3000:]
    line = next(ln for ln in plan.stdout.splitlines() if " sglang_install " in ln)
    assert "; the first start lacks 1: nvcc" in line, line
    assert "  toolchain: missing nvcc (CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda, the server's stack: flashinfer's " \
           "JIT): a stack that carries nvidia-cuda-nvcc" in plan.stdout, plan.stdout[-3000:]
    assert "CUDA_HOME" not in env.ct("cat /etc/systemd/system/sglang.service").stdout

    venv = stack_venv(env)
    python = env.ct(f"ls -d {venv}/lib/python3*").stdout.strip().splitlines()[0]
    home = f"{python}/site-packages/nvidia/cu13"
    nvcc = f"{home}/bin/nvcc"
    assert env.ct(f"mkdir -p {home}/bin && printf '#!/bin/sh\\n' > {nvcc} && chmod 755 {nvcc}").rc == 0
    doctor = env.run("--json", "doctor", "host", env.host)
    row = next(f for f in doctor.json["findings"] if f["check"] == "ct-toolchain")
    assert row["status"] == "ok" and f"{home}/bin/nvcc, the stack's own" in row["observed"], row

    up = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=600)
    assert up.rc == 0, up.text[-3000:]
    install = next(s for s in up.json["steps"] if s["name"] == "sglang_install")
    assert install["details"]["toolchain_missing"] == [], install
    assert f"\nEnvironment=CUDA_HOME={home}\n" in env.ct("cat /etc/systemd/system/sglang.service").stdout
    assert json.loads(env.ct("cat /var/lib/deploy/current/meta.json").stdout)["stack"]["cuda_home"] == home
    environ = server_environ(env)
    assert environ.get("CUDA_HOME") == home and "nvidia/cu13" not in environ.get("PATH", ""), environ
    assert health(env) == "200"
