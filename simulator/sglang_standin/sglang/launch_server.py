"""`python -m sglang.launch_server ...` (simulated); see sglang/_sim/server.py."""

from __future__ import annotations

if __name__ == "__main__":
    from sglang._sim.server import main

    main()
