"""Simulated `sglang` for the deploy simulator: same CLI flags (from the real schemas), fake GPUs.

`__version__` comes from the installed wheel's metadata (or $SGLANG_SIM_VERSION), so one code tree serves both
simulated releases (0.5.12.post1 and 0.5.23).
"""

from sglang._sim import hub_kernels  # noqa: F401 - what transformers does at `import sglang` (kernels' layers)
from sglang._sim.env import installed_version

__version__ = installed_version()
version = __version__
