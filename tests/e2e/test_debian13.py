"""PVE 9's `debian-13-standard` (trixie, Python 3.13): `up` from bare and the site template pass on it (issue 36).

The simulated node's appliance index lists `debian-13-standard_13.1-2`; its download is the real trixie template
built here with debootstrap (simulator/lxc/template.py), so the container really has trixie's apt, systemd 257 and
python3.13, and pip really picks the wheelhouse's cp313 wheels. The tests of this module share one host and run in
order: the first converges it from a bare container, the second replaces it with one from a trixie site template.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulator.lxc import template as lxc_template
from tests.e2e.conftest import DeployEnv, bare_lxc_env, make_env

FAMILY = f"local:vztmpl/{lxc_template.TRIXIE.family}"


@pytest.fixture(scope="module")
def trixie_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployEnv]:
    with bare_lxc_env(tmp_path_factory, "trixie-e2e", FAMILY) as env:
        yield env


def _steps(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report["steps"]}


def _assert_trixie_server(env: DeployEnv) -> None:
    """The container is Debian 13 with its own Python 3.13, and sglang runs from a 3.13 venv with cp313 wheels
    (aiohttp: compiled, a dependency of the stand-in as of real sglang)."""
    assert 'VERSION_ID="13"' in env.ct("cat /etc/os-release").stdout
    py = env.ct("/root/ml-env/bin/python -c 'import sys; print(sys.version_info[:2])'")
    assert py.stdout.strip() == "(3, 13)", py.text
    wheels = env.ct("cat /root/ml-env/lib/python3.13/site-packages/aiohttp-*.dist-info/WHEEL")
    assert wheels.rc == 0 and "Tag: cp313-cp313-" in wheels.stdout, wheels.text
    assert env.ct("systemctl is-active sglang").stdout.strip() == "active"


@pytest.mark.timeout(1800)
def test_up_from_a_bare_debian13_container(trixie_env: DeployEnv) -> None:
    res = trixie_env.run("--json", "up", "host", trixie_env.host, timeout=1500)
    assert res.rc == 0, res.text[-3000:]
    steps = _steps(res.json)
    assert "download template debian-13-standard_13.1-2_amd64.tar.zst" in steps["container"]["summary"], \
        steps["container"]
    for name in ("ct_packages", "driver_userspace", "sglang_install", "model_weights", "server_unit"):
        assert steps[name]["status"] == "changed", (name, steps[name])
    for name in ("health", "smoke", "throughput"):
        assert steps[name]["status"] == "ok", (name, steps[name])
    _assert_trixie_server(trixie_env)
    assert "patch" in steps["ct_packages"]["summary"], steps["ct_packages"]
    assert trixie_env.ct("patch --version").stdout.startswith("GNU patch ")

    again = trixie_env.run("--json", "up", "host", trixie_env.host, "--skip-bench", timeout=600)
    assert again.rc == 0, again.text[-3000:]
    assert again.json["summary"] == "no changes", [(s["name"], s["status"]) for s in again.json["steps"]
                                                   if s["status"] == "changed"]


@pytest.mark.timeout(1800)
def test_a_debian13_site_template_serves_without_installing(trixie_env: DeployEnv, tmp_path: Path) -> None:
    from tests.e2e import site_template

    volid = site_template.install(Path(trixie_env.sim.host_dir), lxc_template.TRIXIE)
    assert trixie_env.ssh("pct stop 120 && pct destroy 120", timeout=180).rc == 0
    env = make_env(trixie_env.sim, tmp_path, volid)
    res = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=900)
    assert res.rc == 0, res.text[-3000:]
    steps = _steps(res.json)
    assert "create CT 120" in steps["container"]["summary"], steps["container"]
    for name in ("ct_packages", "driver_userspace", "model_weights"):
        assert steps[name]["status"] == "ok", (name, steps[name])  # all of it came with the trixie archive
    # the archive's venv is adopted as this host's stack (a record, no pip run: docs/stacks.md)
    install = steps["sglang_install"]
    assert install["status"] == "ok" or install["summary"].startswith("adopt /root/ml-env (sglang "), install
    for name in ("health", "smoke"):
        assert steps[name]["status"] == "ok", (name, steps[name])
    _assert_trixie_server(env)
