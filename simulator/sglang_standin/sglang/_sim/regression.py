"""A regressed build in the server's own venv: the knob `deploy sim index publish … --regression KIND` put inside a
wheel (<package>/_sim_regression.py, simulator/software/wheels.py), read once at start.

Why here and not in the container's faults: the bad build is a property of the venv, so a release on another stack
(the previous one, a locked one) runs clean while the venv that resolved the build misbehaves, as with the real
flashinfer NaN race or an sglang that auto-picks a backend the GPU lacks. Each knob goes through the server's
existing fault path: nan → the `output=nan` answers (golden.py), unsupported-arch → `fatal=unsupported-arch`
(FATAL_LINES), slow → every decode step SLOW_STEP_FACTOR longer (perf.py).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

#: The stand-in packages whose builds can carry a knob (their import names).
PACKAGES = ("sglang", "flashinfer", "sgl_kernel", "torch")
MODULE = "_sim_regression.py"
#: The container faults each knob stands for.
FAULTS: dict[str, dict[str, Any]] = {"nan": {"output": "nan"}, "unsupported-arch": {"fatal": "unsupported-arch"},
                                     "slow": {}}
#: slow: a decode step takes 1/0.7 as long, so decode throughput falls by about 30 %.
SLOW_STEP_FACTOR = 1 / 0.7


def _knob(package: str) -> str | None:
    """The knob of the installed `package` (read from its file, without importing the package), else None."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for where in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(where) / MODULE).read_text()
        except OSError:
            continue
        m = re.search(r"^REGRESSION = '([^']+)'$", text, re.M)
        if m and m.group(1) in FAULTS:
            return m.group(1)
    return None


def installed() -> dict[str, str]:
    """{import name: knob} of every regressed build in this venv."""
    return {p: k for p in PACKAGES if (k := _knob(p)) is not None}


def faults(knobs: dict[str, str]) -> dict[str, Any]:
    """The container faults the knobs stand for, merged."""
    out: dict[str, Any] = {}
    for kind in knobs.values():
        out.update(FAULTS[kind])
    return out


def step_factor(knobs: dict[str, str]) -> float:
    return SLOW_STEP_FACTOR if "slow" in knobs.values() else 1.0
