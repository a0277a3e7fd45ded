"""The stand-in server's performance model (simulator/sglang_standin/sglang/_sim/perf.py), loaded by path.

Why by path: importing it as `sglang._sim.perf` would put the stand-in `sglang` package on this process's path,
where the orchestrator's tests must not find it. perf.py imports nothing of the stand-in.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PERF_PY = Path(__file__).resolve().parents[1] / "simulator/sglang_standin/sglang/_sim/perf.py"


def perf_module() -> ModuleType:
    return _load("standin_perf_model", PERF_PY)


def powercap_module() -> ModuleType:
    """The stand-in's power-cap model (_sim/powercap.py: it imports nothing of the stand-in either)."""
    return _load("standin_powercap_model", PERF_PY.with_name("powercap.py"))


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module
