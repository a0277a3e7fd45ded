"""The `sglang` console script of the wheel: `sglang serve ...` runs the server, like the real CLI."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["serve"]:
        print("usage: sglang serve [server flags]  (deploy simulator: only `serve` is simulated)", file=sys.stderr)
        return 2
    from sglang._sim.server import main as serve

    serve(args[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
