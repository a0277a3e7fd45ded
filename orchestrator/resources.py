"""The data files shipped inside the package, and the only module that knows where they live (but the shell
scripts, which sit beside their renderer: orchestrator/scripts).

Templates, playbooks, flag schemas and the example inventory are package data: a wheel installs them next to the
code, so they are found through `importlib.resources` (never relative to a checkout) and the
installed `deploy` works from any directory. Each function returns a real directory: the tool lists, globs and
hands these paths to Jinja and to users (who copy playbooks and the example inventory), which a zipped install
could not offer; such an install is refused with a clear error instead of a traceback.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from orchestrator.errors import ConfigError

PACKAGE = "orchestrator"


@functools.cache
def _shipped(*parts: str) -> Path:
    where = resources.files(PACKAGE).joinpath(*parts)
    if not isinstance(where, Path) or not where.is_dir():
        raise ConfigError(f"deploy's shipped data {'/'.join(parts)} is not a directory on disk ({where})",
                          fix="install deploy from its wheel or a checkout (pip install, not a zipped bundle)")
    return where


def templates_dir() -> Path:
    """Jinja templates of the files deploy installs: sglang.service, sglang.env, passthrough lines, router."""
    return _shipped("templates")


def playbooks_dir() -> Path:
    """The shipped playbooks (`--playbook NAME`); users copy one and pass its path."""
    return _shipped("playbooks")


def flag_schemas_dir() -> Path:
    """The real `sglang --help` flag schemas, one JSON file per pinned sglang version."""
    return _shipped("flags", "schemas")


def router_schemas_dir() -> Path:
    """The real `sglang-router` flag schemas, one JSON file per router version."""
    return _shipped("router", "schemas")


def probes_dir() -> Path:
    """Python probes shipped to the container on stdin (flag schema, P2P bandwidth, smoke)."""
    return _shipped("probes")


def probe_text(name: str) -> str:
    """The text of a shipped probe (e.g. "flags_probe.py"), sent to the container on stdin or with `pct push`."""
    return (probes_dir() / name).read_text()



def module_path(module: str) -> Path:
    """The file of a program shipped to the container that lives beside its concern (`orchestrator.p2p.probe`,
    `orchestrator.watchdog.probe`): a module of the package, read as text, never imported on the target."""
    package, _, name = module.rpartition(".")
    where = resources.files(package).joinpath(f"{name}.py")
    if not isinstance(where, Path):
        raise ConfigError(f"deploy's shipped program {module} is not a file on disk ({where})",
                          fix="install deploy from its wheel or a checkout (pip install, not a zipped bundle)")
    return where


def module_source(module: str) -> str:
    """The text of such a program (module_path), sent to the container on stdin or with `pct push`."""
    return module_path(module).read_text()

def flags_probe_source() -> str:
    """The probe that validates an argv with the installed program's own parser (sglang's, or the router's)."""
    return probe_text("flags_probe.py")


def golden_prompts_file() -> Path:
    """The correctness gate's shipped golden prompts (a profile's `correctness.prompts` replaces them)."""
    return _shipped("gates") / "golden.yaml"


def xid_catalog_file() -> Path:
    """The shipped Xid catalog: code -> meaning -> action, each rule with its source (docs/hardware.md)."""
    return _shipped("hardware") / "xid.yaml"


def example_inventory_dir() -> Path:
    """The worked example (the seeds' host, the glm5-nvfp4 profile, bench presets): `deploy init` copies it."""
    return _shipped("examples", "inventory")


def monitoring_dir() -> Path:
    """The alert rules (rules.yaml) and the Grafana dashboard (dashboard.json) that operators drop into their
    Prometheus and Grafana (docs/monitoring.md)."""
    return _shipped("monitoring")
