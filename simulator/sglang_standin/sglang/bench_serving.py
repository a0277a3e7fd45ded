"""`python -m sglang.bench_serving ...` (simulated); see sglang/_sim/bench.py."""

from __future__ import annotations

if __name__ == "__main__":
    import sys

    from sglang._sim.bench import main

    sys.exit(main())
