"""paramiko, loaded without the `invoke` package that paramiko.config looks for.

Why: paramiko.config imports invoke whenever it is installed, only to run an ssh_config `Match exec` line; deploy
reads no ssh_config (the inventory says user, port, key and known_hosts), and invoke brings unittest.mock, asyncio
and ssl with it: ~0.05 s of CPU that every command paid before it connected (tests/perf/startup.py). So invoke's
import is refused while paramiko loads, unless the process imported invoke already.
"""

from __future__ import annotations

import sys

_blocked = "invoke" not in sys.modules
if _blocked:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # `import invoke` raises ImportError, as if absent
try:
    import paramiko
finally:
    if _blocked:
        del sys.modules["invoke"]

__all__ = ["paramiko"]
