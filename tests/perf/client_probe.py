"""Run one `deploy` command in this process with timers around its phases; tests/perf/client_cost.py starts it.

`python tests/perf/client_probe.py OUT.json DEPLOY-ARGS...`: the timers wrap the functions each phase goes through
(the inventory's load and validation, the renderers, the SSH handshake, every round trip, the report), each counting
its own wall and CPU (time.process_time: this process, all threads) without what it calls that another timer counts
(a round trip that first connects counts the connect in `connect`). "imports and CLI parsing" is from this file's
first line to the command's body; "command body, other" is the body less the phases above (the steps' own work and
the modules they import lazily). Nothing here changes what the command does: the wrapped functions are called as
they are, with their arguments and results. The phases go to OUT.json as a list of [phase, wall_s, cpu_s].
"""

from __future__ import annotations

import time

T0_WALL, T0_CPU = time.time(), time.process_time()

import functools  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: (phase, module, attribute path): the functions each phase goes through.
PHASES = (
    ("command body, other", "orchestrator.cli.common", "run_command"),
    ("inventory load and validation", "orchestrator.inventory.loader", "load_inventory"),
    ("render (unit, env, boot unit)", "orchestrator.render.bundle", "render_bundle"),
    ("render (scripts)", "orchestrator.scripts", "render_script"),
    ("connect and key exchange", "orchestrator.remote.ssh", "SshHost._open"),
    ("round trip", "orchestrator.remote.ssh", "SshHost.run"),
    ("report", "orchestrator.ui.output", "Output.finish"),
)


class Phases:
    """Exclusive wall and CPU per phase: a stack of running timers, each paused while an inner one runs."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}
        self.stack: list[tuple[str, float, float]] = []
        self.trips = 0

    def _charge(self, until_wall: float, until_cpu: float) -> None:
        if self.stack:
            name, wall, cpu = self.stack[-1]
            acc = self.totals.setdefault(name, [0.0, 0.0])
            acc[0] += until_wall - wall
            acc[1] += until_cpu - cpu

    def wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            label = name
            if name == "round trip":
                self.trips += 1
                label = f"round trip {self.trips} ({kwargs.get('what') or 'command'})"
            now_wall, now_cpu = time.time(), time.process_time()
            self._charge(now_wall, now_cpu)
            self.stack.append((label, now_wall, now_cpu))
            try:
                return func(*args, **kwargs)
            finally:
                end_wall, end_cpu = time.time(), time.process_time()
                self._charge(end_wall, end_cpu)
                self.stack.pop()
                if self.stack:  # the outer timer resumes now
                    outer, _, _ = self.stack[-1]
                    self.stack[-1] = (outer, end_wall, end_cpu)

        return timed


def install(phases: Phases) -> None:
    for name, module, attr in PHASES:
        owner: Any = importlib.import_module(module)
        *path, leaf = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, leaf, phases.wrap(name, getattr(owner, leaf)))


def main() -> None:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    phases = Phases()
    install(phases)  # imports the modules that hold the wrapped functions: part of "imports and CLI parsing"
    import orchestrator.cli.common as common

    body = common.run_command

    def started(*args: Any, **kwargs: Any) -> Any:
        rows.append(("imports and CLI parsing", time.time() - T0_WALL, time.process_time() - T0_CPU))
        return body(*args, **kwargs)

    common.run_command = started
    for mod in list(sys.modules.values()):  # the commands' modules bind run_command when they are imported
        if getattr(mod, "run_command", None) is body and mod is not common:
            mod.__dict__["run_command"] = started  # a module of the CLI: rebinds its import of it
    rows: list[tuple[str, float, float]] = [("interpreter start (until this file ran)", 0.0, T0_CPU)]
    sys.argv = ["deploy", *argv]
    from orchestrator.cli import main as deploy

    try:
        deploy()
    finally:
        rows += [(k, v[0], v[1]) for k, v in phases.totals.items()]
        out.write_text(json.dumps({"end_wall": time.time(), "t0_wall": T0_WALL, "rows": rows}))


if __name__ == "__main__":
    main()
