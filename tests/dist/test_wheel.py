"""The distribution as a user gets it: the wheel installed into a fresh venv outside the checkout, run from a
directory with no checkout, and the sdist's file list.

The venv has no pip and no copy of the dependencies: a `.pth` line puts this venv's site-packages on its path. A
plain path line runs no code, so the editable install's import hook in that directory stays inactive and the
checkout is not importable: every file the CLI reads below must have come out of the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator import DISTRIBUTION, __version__
from tests.shared import H200_NVLINK, NVIDIA_SMI

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "orchestrator"
#: What the build needs, copied out of the checkout so that its build/ and *.egg-info are neither used nor left.
BUILD_INPUTS = ("pyproject.toml", "README.md", "orchestrator", "simulator")
#: The shipped data, by folder of the package and pattern: each file must be in the wheel and in the sdist.
DATA = (("templates", "*.j2"), ("playbooks", "*.yaml"), ("scripts", "*.j2"), ("examples/inventory", "*.yaml"),
        ("flags/schemas", "*.json"), ("router/schemas", "*.json"), ("probes", "*.py"), ("hardware", "*.yaml"))

#: Run by the installed venv's python: where its orchestrator lives, and every shipped file loaded the way the
#: tool loads it (playbooks checked against the step registry, templates and scripts compiled by Jinja).
PROBE = """
import json, orchestrator
from importlib import metadata
from orchestrator import resources
from orchestrator.flags.schema import FlagSchema
from orchestrator.hardware.catalog import load_catalog
from orchestrator.router.release import RouterRelease
from orchestrator.router.render import router_schema
from orchestrator.inventory.loader import load_inventory
from orchestrator.playbooks import available_playbooks, load_playbook
from orchestrator.render.files import environment
from orchestrator.scripts import SCRIPTS_DIR, _env as scripts_env
from orchestrator.steps import load_all_steps

ROUTER_0_3_2 = RouterRelease("sglang-router", "0.3.2")

steps = load_all_steps()
example = load_inventory(resources.example_inventory_dir())
print(json.dumps({
    "file": orchestrator.__file__,
    "version": metadata.version("%s"),
    "playbooks": {n: load_playbook(n, steps).step_names for n in available_playbooks()},
    "templates": sorted(environment().get_template(p.name).name for p in resources.templates_dir().glob("*.j2")),
    "scripts": sorted(scripts_env().get_template(p.name).name for p in SCRIPTS_DIR.glob("*.j2")),
    "flag_versions": FlagSchema.known_versions(),
    "router_options": len(router_schema(ROUTER_0_3_2).option_strings),
    "probes": sorted(p.name for p in resources.probes_dir().glob("*.py") if resources.probe_text(p.name)),
    "example": [sorted(example.hosts), sorted(example.profiles), sorted(example.presets)],
    "xid_rules": len(load_catalog().rules),
}))
""" % DISTRIBUTION


@dataclass(frozen=True)
class Installed:
    venv: Path
    work: Path
    wheel: Path
    sdist: Path

    def deploy(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DEPLOY_", "PYTHON"))}
        env |= {"COLUMNS": "200", "DEPLOY_STATE_DIR": str(self.work / "state")}
        return subprocess.run([str(self.venv / "bin" / "deploy"), *args], capture_output=True, text=True,
                              cwd=self.work, env=env, timeout=60)


def shipped(folder: str, pattern: str) -> list[str]:
    """The checkout's data files of one folder, as paths inside the package."""
    return sorted(f"orchestrator/{folder}/{p.name}" for p in (PKG / folder).glob(pattern))


def run(argv: list[str], cwd: Path) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert res.returncode == 0, f"{argv}: {res.stdout[-2000:]}{res.stderr[-2000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, src / name)
    out = tmp / "out"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", str(out), "."], src)
    run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"], src)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
         "--no-index", "-q", str(wheel)], tmp)
    work = tmp / "work"
    work.mkdir()
    yield Installed(venv=venv, work=work, wheel=wheel, sdist=sdist)


def test_the_wheel_and_the_sdist_carry_every_shipped_file(installed: Installed) -> None:
    assert installed.wheel.name == f"{DISTRIBUTION.replace('-', '_')}-{__version__}-py3-none-any.whl"
    top = f"{DISTRIBUTION.replace('-', '_')}-{__version__}"
    assert installed.sdist.name == f"{top}.tar.gz"
    in_wheel = set(zipfile.ZipFile(installed.wheel).namelist())
    with tarfile.open(installed.sdist) as tar:
        in_sdist = {n.removeprefix(f"{top}/") for n in tar.getnames()}
    assert "pyproject.toml" in in_sdist
    for folder, pattern in DATA:
        files = shipped(folder, pattern)
        assert files, f"no {pattern} in orchestrator/{folder}"
        assert not set(files) - in_wheel, f"missing from the wheel: {sorted(set(files) - in_wheel)}"
        assert not set(files) - in_sdist, f"missing from the sdist: {sorted(set(files) - in_sdist)}"
    assert not [n for n in in_wheel if n.startswith(("templates/", "playbooks/", "inventory/"))]


def test_the_installed_package_is_the_wheel_and_loads_every_shipped_file(installed: Installed) -> None:
    res = subprocess.run([str(installed.venv / "bin" / "python"), "-c", PROBE], capture_output=True, text=True,
                         cwd=installed.work, timeout=60, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert Path(got["file"]).is_relative_to(installed.venv), got["file"]  # not the checkout
    assert got["version"] == __version__
    assert sorted(got["playbooks"]) == sorted(Path(p).stem for p in shipped("playbooks", "*.yaml"))
    assert got["playbooks"]["up"][0] == "connect" and "server_unit" in got["playbooks"]["up"]
    assert got["templates"] == [Path(p).name for p in shipped("templates", "*.j2")]
    assert got["scripts"] == [Path(p).name for p in shipped("scripts", "*.j2")]
    assert got["flag_versions"] == ["0.5.12.post1", "0.5.23"] and got["router_options"] > 10
    assert got["probes"] == [Path(p).name for p in shipped("probes", "*.py")]
    assert got["example"] == [["pve-gpu-1"], ["glm5-nvfp4"],
                              ["quick", "seed-1024x256", "seed-c1024", "seed-c2048", "seed-c256", "seed-c512"]]
    from orchestrator.hardware.catalog import load_catalog

    assert got["xid_rules"] == len(load_catalog().rules)  # the catalog is shipped and loads from the wheel


def test_the_installed_cli_works_from_a_directory_without_a_checkout(installed: Installed) -> None:
    version = installed.deploy("--version")
    assert version.stdout.strip() == f"deploy, version {__version__} ({DISTRIBUTION})"

    init = installed.deploy("init", "site")
    assert init.returncode == 0, init.stderr
    assert init.stdout.splitlines()[-1] == "next: edit site/hosts.yaml, then: deploy --inventory site doctor host pve-gpu-1"
    again = installed.deploy("init", "site")
    assert again.returncode == 2 and "already holds inventory YAML" in again.stderr

    helped = installed.deploy("--inventory", "site", "bench", "--help")
    assert helped.returncode == 0 and f"Presets (inventory {installed.work / 'site'})" in helped.stdout
    assert "seed-1024x256  128 in / 256 out tokens, 1024 prompts, rate 999/s" in helped.stdout
    shipped_presets = installed.deploy("--inventory", "nowhere", "bench", "--help")
    assert f"Presets shipped with deploy, in {installed.venv}" in " ".join(shipped_presets.stdout.split())

    rendered = installed.deploy("--inventory", "site", "--json", "render", "host", "pve-gpu-1", "--pve-version", "9.0",
                                "--devices-file", str(H200_NVLINK / "ls-dev-nvidia.txt"),
                                "--proc-devices-file", str(H200_NVLINK / "proc-devices.txt"))
    assert rendered.returncode == 0, rendered.stderr
    doc = json.loads(rendered.stdout)
    files = {f["name"]: f["content"] for f in doc["files"]}
    assert doc["method"] == "devN" and "dev0: /dev/nvidia0,mode=0666" in files["passthrough-devN"]
    assert "--nsa-decode-backend trtllm" in files["sglang.service"] and 'NCCL_P2P_LEVEL="SYS"' in files["sglang.env"]

    p2p = installed.deploy("--json", "verify-p2p", "--topo-file", str(H200_NVLINK / "topo-m.txt"),
                           "--p2p-read-file", str(H200_NVLINK / "topo-p2p-r.txt"),
                           "--p2p-write-file", str(H200_NVLINK / "topo-p2p-w.txt"))
    assert p2p.returncode == 0, p2p.stderr
    assert json.loads(p2p.stdout)["verdict"]["status"] == "pass"
    vm_capture = NVIDIA_SMI / "rtx-pro-6000-x8-vm"
    vm = installed.deploy("verify-p2p", "--topo-file", str(vm_capture / "topo-m.txt"),
                          "--p2p-read-file", str(vm_capture / "topo-p2p-r.txt"),
                          "--p2p-write-file", str(vm_capture / "topo-p2p-w.txt"))
    assert vm.returncode == 1 and "PHB" in vm.stdout  # the check fails: a real exit code, not a crash
