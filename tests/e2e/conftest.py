"""End-to-end harness: the real `deploy` CLI against the simulated host over real SSH and HTTPS.

`DeployEnv.run` runs the CLI in the test process (tests/e2e/inprocess.py: isolated environment, cwd, argv and
streams); `run_process` and `popen` start it as a separate process, for tests about the process (signals, exit
codes, start-up).

`deploy_env` gives each test a fresh simulated host (no containers, no faults), its own inventory (the
shipped example's profiles with a small bench preset) and its own local state dir. Assertions read the host
through the `ssh` binary with the simulator's key, independent of the tool's own SSH layer.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.inprocess import run_cli, subprocess_forced
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[2]

E2E_PRESET = {  # big enough that flag changes show in throughput, small enough for a 2-core CI machine
    "dataset_name": "random-ids", "random_input_len": 32, "random_output_len": 64, "random_range_ratio": 1.0,
    "num_prompts": 256, "request_rate": "inf",
}


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.stdout))

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


@dataclass
class DeployEnv:
    sim: Any
    inventory: Path
    env: dict[str, str]
    profile_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return Path(self.sim.host_dir).parent.parent

    @property
    def host(self) -> str:
        return str(self.sim.name)

    def run(self, *args: str, timeout: float = 300) -> Result:
        """`deploy ARGS` in this process as a fresh process would run it (tests/e2e/inprocess.py): same exit code,
        stdout and stderr, real SSH and HTTPS to the simulated host, without a second of interpreter start-up."""
        if subprocess_forced():
            return self.run_process(*args, timeout=timeout)
        return Result(*run_cli(args, self.env, REPO))

    def run_process(self, *args: str, timeout: float = 300) -> Result:
        """`deploy ARGS` as a separate process, for tests about the process itself (start-up, exit, signals)."""
        proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              env=self.env, cwd=REPO, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def popen(self, *args: str, lock_ttl_s: int | None = None) -> subprocess.Popen[str]:
        """`deploy ARGS` in the background; `lock_ttl_s` shortens its host lock's lease (for runs a test kills)."""
        env = self.env if lock_ttl_s is None else {**self.env, "DEPLOY_LOCK_TTL_S": str(lock_ttl_s)}
        return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)

    def ssh(self, command: str, timeout: float = 60) -> Result:
        """Run a command on the simulated PVE host with the plain ssh client (strict host keys).

        The client shares one connection per host (ControlMaster, closed 20 s after its last use): a test reads
        the host hundreds of times, and a handshake per read cost more CPU than the reads themselves.
        """
        s = self.sim
        proc = subprocess.run(
            ["ssh", "-i", str(s.key_file), "-o", f"UserKnownHostsFile={s.known_hosts}", "-o",
             "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o",
             f"ControlPath={control_dir()}/%C", "-o", "ControlPersist=20", "-p", str(s.ssh_port),
             f"root@{s.address}", command], capture_output=True, text=True, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def ct(self, command: str, vmid: int = 120) -> Result:
        return self.ssh(f"pct exec {vmid} -- bash -c {shlex.quote(command)}")

    def set_profile(self, **changes: Any) -> None:
        """Change the glm5-nvfp4 profile (flags merge; other keys replace) and rewrite profiles.yaml."""
        flags = changes.pop("flags", None)
        if flags is not None:
            self.profile_overrides.setdefault("flags", {}).update(flags)
        self.profile_overrides.update(changes)
        write_profiles(self.inventory, self.profile_overrides)

    def faults(self, **knobs: Any) -> None:
        from simulator.manager.faults import set_faults

        set_faults(self.root, self.host, **knobs)

    def ct_faults(self, vmid: int = 120, **knobs: Any) -> None:
        from simulator.manager.faults import set_ct_faults

        set_ct_faults(self.root, self.host, vmid, **knobs)


@functools.cache
def control_dir() -> Path:
    """This process's directory of shared SSH connections (a short path: a socket's name is at most 107 bytes, and
    the tests' temporary directory is deep); removed at exit, each connection ending by itself when idle."""
    path = Path(tempfile.mkdtemp(prefix="deploy-test-ssh-", dir="/tmp"))
    atexit.register(shutil.rmtree, path, True)
    return path


def write_profiles(inventory: Path, overrides: dict[str, Any]) -> None:
    data = yaml.safe_load((EXAMPLE_INVENTORY / "profiles.yaml").read_text())
    prof = data["profiles"]["glm5-nvfp4"]
    prof["bench_preset"] = "e2e"
    prof["start_timeout_s"] = 60
    # A check every 30 s instead of 10: a converged container keeps its watchdog running until the next test resets
    # the host, and on the suite's shared 2-core machine those idle checks (a Python start and a tiny generation
    # each) added up to minutes of CPU. The watchdog's own tests set their intervals (tests/e2e/test_watchdog.py).
    prof["watchdog"] = {"interval_s": 30}
    for key, value in overrides.items():
        if key == "flags":  # None removes a flag
            prof["flags"].update({k: v for k, v in value.items() if v is not None})
            for k in [k for k, v in value.items() if v is None]:
                prof["flags"].pop(k, None)
        else:
            prof[key] = value
    (inventory / "profiles.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def installed_like_environ() -> dict[str, str]:
    """This process's environment for the programs a test or perf script starts, so that they run as installed ones
    do, from their bytecode caches: a PYTHONDONTWRITEBYTECODE inherited from the machine would make every `deploy`
    compile ~100 modules from source (~0.17 s of CPU a run, measured)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def make_env(sim: Any, tmp_path: Path, ostemplate: str | None = None) -> DeployEnv:
    """An inventory for this simulated host (the example's profiles and presets plus the e2e preset); `ostemplate`
    replaces every host's container template (a site template, tests/e2e/site_template.py)."""
    inv = tmp_path / "inventory"
    inv.mkdir()
    root = Path(sim.host_dir).parent.parent
    hosts = yaml.safe_load((root / "inventory.yaml").read_text())
    if ostemplate:
        for entry in hosts["hosts"].values():
            entry["container"]["ostemplate"] = ostemplate
    (inv / "sim.yaml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    presets = yaml.safe_load((EXAMPLE_INVENTORY / "presets.yaml").read_text())
    presets["presets"]["e2e"] = E2E_PRESET
    (inv / "presets.yaml").write_text(yaml.safe_dump(presets, sort_keys=False))
    write_profiles(inv, {})
    env = {**installed_like_environ(), "DEPLOY_INVENTORY": str(inv), "DEPLOY_STATE_DIR": str(tmp_path / "state"),
           "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    return DeployEnv(sim=sim, inventory=inv, env=env)


@contextlib.contextmanager
def bare_lxc_env(tmp_path_factory: pytest.TempPathFactory, name: str,
                 ostemplate: str | None = None) -> Iterator[DeployEnv]:
    """A module's own simulated host (OFFSET_LXC) whose container starts bare from a stock template (`ostemplate`:
    another family, e.g. debian-13-standard); skipped where LXC cannot run."""
    from tests import sim_hosts
    from tests.conftest import sim_root
    from tests.sim.lxc_support import lxc_skip_reason

    reason = lxc_skip_reason()
    if reason:
        pytest.skip(reason)
    with sim_root(tmp_path_factory, name, sim_hosts.OFFSET_LXC) as (_root, (info,)):
        yield make_env(info, tmp_path_factory.mktemp(f"{name}-env"), ostemplate)


def site_ostemplate(infos: list[Any]) -> str:
    """The site template installed on these hosts."""
    from tests.e2e import site_template

    volids = {site_template.install(Path(i.host_dir)) for i in infos}
    return volids.pop()


def make_fleet_env(infos: list[Any], tmp_path: Path, groups: dict[str, list[str]] | None = None,
                   ostemplate: str | None = None) -> DeployEnv:
    """An inventory for several simulated hosts of one root (make_env) with `groups:` (default: prod = all)."""
    env = make_env(infos[0], tmp_path, ostemplate)
    groups = groups or {"prod": [i.name for i in infos]}
    (env.inventory / "groups.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return env


def until(check: Any, timeout_s: float = 60.0, interval_s: float = 0.3, max_interval_s: float = 1.0) -> Any:
    """Poll `check()` until it returns something truthy (returned) or the time is up (its last value).

    The pause grows from `interval_s` to `max_interval_s`: most checks are an SSH command and a `pct exec` (~0.2 s
    of CPU on the 2-core machine the suite shares), and a wait of minutes at a fixed 0.3 s cost more CPU than the
    test it waited in.
    """
    deadline = time.monotonic() + timeout_s
    pause = interval_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(pause)
        pause = min(pause * 1.5, max(max_interval_s, interval_s))
    return check()


def wait_lease_expired(env: DeployEnv, timeout_s: float = 60.0) -> None:
    """Until the host lock's lease (left by a run the test killed) has run out, on the host's own lease clock.

    The lock script calls a lease live while `now < expires`, `now` being /proc/uptime's seconds: this waits for
    exactly that, instead of sleeping the whole lease time plus a margin.
    """
    from orchestrator.locks.lease import LEASE_FILE, LOCK_DIR

    probe = (f"read -r now _ < /proc/uptime; exp=$(sed -n 's/^expires=//p' {LOCK_DIR}/{LEASE_FILE} 2>/dev/null); "
             "echo $(( ${exp:-0} - ${now%%.*} ))")

    def expired() -> bool:
        res = env.ssh(probe)
        return res.rc == 0 and int(res.stdout.strip() or 0) <= 0

    assert until(expired, timeout_s, 0.2), "the killed run's host lock lease never expired"


@pytest.fixture
def deploy_env(sim: Any, tmp_path: Path) -> DeployEnv:
    return make_env(sim, tmp_path, site_ostemplate([sim]))


SHARED = "converged-host"  # the xdist group of the tests that share one converged host


@pytest.fixture
def converged_shared(request: pytest.FixtureRequest, sim_host: Any, sim_resets: Any,
                     tmp_path: Path) -> Iterator[DeployEnv]:
    """A converged host shared by the tests that only read it (status, plan, verify-p2p, history, bench, refused
    input): converged once, then handed on while no other test reset the session host in between. Mark such a
    test `@pytest.mark.xdist_group(SHARED)` (without xdist such tests run one after another; under xdist each worker
    converges its own once). Each test gets its own inventory and local state (ledger); it must leave
    the host as it found it: no change, no fault, no stopped server.
    """
    from simulator.manager.faults import reset_host

    env = make_env(sim_host, tmp_path, site_ostemplate([sim_host]))
    if sim_resets.shared_at != sim_resets.count:
        sim_resets.count += 1
        reset_host(sim_host.host_dir.parent.parent, sim_host.name)
        res = env.run("--json", "up", "host", env.host, "--skip-bench")
        assert res.rc == 0, res.text
        sim_resets.shared_at = sim_resets.count
    failed = request.session.testsfailed
    yield env
    if request.session.testsfailed != failed:  # a failed test may have left the host changed: converge again
        sim_resets.shared_at = None


@pytest.fixture
def converged(deploy_env: DeployEnv) -> DeployEnv:
    """A host on which `deploy up` has already converged (bench skipped to save time)."""
    res = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert res.rc == 0, res.text
    return deploy_env
