"""One simulated host from the site template, for the perf scripts that measure a single host."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simulator.manager.lifecycle import sim_down, sim_up
from tests.e2e import site_template
from tests.e2e.conftest import DeployEnv, make_env


@contextlib.contextmanager
def template_host(time_scale: float, default_first: int = 93) -> Iterator[tuple[Any, DeployEnv, Path]]:
    """sim-N (N from DEPLOY_SIM_FIRST) on its own root, its CT made from the site template: (info, env, root);
    the host is taken down on exit."""
    with tempfile.TemporaryDirectory(prefix="deploy-perf-") as tmp:
        root = Path(tmp) / "sim"
        (info,) = sim_up(root, hosts=1, first=int(os.environ.get("DEPLOY_SIM_FIRST", str(default_first))),
                         time_scale=time_scale)
        try:
            yield info, make_env(info, Path(tmp), site_template.install(Path(info.host_dir))), root
        finally:
            sim_down(root)
