"""The `deploy` command line: one module per command group, registered here."""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator
from typing import Any

from orchestrator.local import codecache

codecache.install()  # before any dataclass is defined: their generated methods come compiled (codecache.py)

import click  # noqa: E402

from orchestrator import DISTRIBUTION, __version__  # noqa: E402
from orchestrator.cli.common import AppContext, SuggestingGroup  # noqa: E402
from orchestrator.local.paths import default_inventory_dir  # noqa: E402

# (module, attribute) of each command; modules are imported lazily so `deploy --help` stays fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("orchestrator.cli.up_cmd", "up"),
    "plan": ("orchestrator.cli.up_cmd", "plan"),
    "doctor": ("orchestrator.cli.doctor_cmd", "doctor"),
    "power": ("orchestrator.cli.power_cmd", "power"),
    "verify-p2p": ("orchestrator.cli.verify_p2p_cmd", "verify_p2p"),
    "render": ("orchestrator.cli.render_cmd", "render"),
    "roll": ("orchestrator.cli.roll_cmd", "roll"),
    "rollback": ("orchestrator.cli.roll_cmd", "rollback"),
    "status": ("orchestrator.cli.roll_cmd", "status"),
    "history": ("orchestrator.cli.roll_cmd", "history"),
    "bench": ("orchestrator.cli.bench_cmd", "bench"),
    "smoke": ("orchestrator.cli.bench_cmd", "smoke"),
    "check": ("orchestrator.cli.check_cmd", "check"),
    "compare": ("orchestrator.cli.bench_cmd", "compare"),
    "profile": ("orchestrator.cli.profile_cmd", "profile"),
    "router": ("orchestrator.cli.router_cmd", "router"),
    "metrics": ("orchestrator.cli.metrics_cmd", "metrics"),
    "tune": ("orchestrator.cli.tune_cmd", "tune"),
    "watch": ("orchestrator.cli.watch_cmd", "watch"),
    "sim": ("orchestrator.cli.sim_cmd", "sim"),
    "init": ("orchestrator.cli.init_cmd", "init"),
    "lock": ("orchestrator.cli.lock_cmd", "lock"),
    "state": ("orchestrator.cli.state_cmd", "state"),
}

SHORT_HELP = {
    "up": "Converge a host (or a fleet): container, GPUs, driver, P2P, SGLang unit, health, smoke, throughput.",
    "plan": "Show what `up` would change, changing nothing.",
    "doctor": "Check host prerequisites (driver, nvidia-uvm, IOMMU, ACS, PVE version) with fixes.",
    "power": "The GPUs' power limit: set (range-checked), read back, kept across reboots by a host unit.",
    "verify-p2p": "Topology and P2P verdict: live on a host, or offline from saved nvidia-smi output.",
    "render": "Print the passthrough lines, sglang.service and sglang.env that would be installed.",
    "roll": "Roll a new server flag set with health, correctness and throughput gates and automatic rollback.",
    "rollback": "Re-install a previous release.",
    "status": "Current release, server health and GPU power now.",
    "history": "Releases (or bench runs with --bench) with verdicts and figures.",
    "bench": "Run bench_serving with GPU telemetry and a diagnosis; sweeps; import.",
    "smoke": "Real generation checks against the running server.",
    "check": "The correctness gate: golden prompts against the current release's record; changes nothing.",
    "compare": "Two ledger runs side by side with deltas.",
    "profile": "Step-time breakdown and verdict from sglang's profiler traces (import TRACE…).",
    "router": "The router's live worker list: status, and a checked host put into or taken out of rotation.",
    "metrics": "Prometheus file-based service discovery for a group (servers, router, node exporters).",
    "tune": "Best server flags under a latency SLO: each point rolled, its SLO limit searched; --apply rolls it.",
    "watch": "GPU faults acted on: a host with a fatal fault is drained out of the router, and put back once clean.",
    "sim": "The simulated Proxmox GPU host on this machine (up, down, status, fault).",
    "lock": "Pin every distribution of a profile's stack with its sha256, resolved in a host's container.",
    "state": "The state store: this machine's (default) or a team's PostgreSQL; status, and migrate into it.",
    "init": "Write an example inventory (hosts, profiles, presets) for a new site into a directory.",
}


@contextlib.contextmanager
def _interrupted_before_the_body() -> Iterator[None]:
    """Ctrl-C before a command's body runs (its lazy import, option parsing, the inventory read) exits 130 as one
    during the body does (run_command), not with click's "Aborted!" and 1, the code of a failed check. Nothing has
    been sent to a host by then: the body is where a command connects."""
    try:
        yield
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C) before the command started; nothing was changed", file=sys.stderr)
        sys.exit(130)


class LazyGroup(SuggestingGroup):
    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        with _interrupted_before_the_body():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _interrupted_before_the_body():
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attr = COMMANDS[cmd_name]
        cmd = getattr(importlib.import_module(module_name), attr)
        assert isinstance(cmd, click.Command), f"{module_name}.{attr} is not a click command"
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SHORT_HELP.get(name, "")) for name in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="deploy", message=f"%(prog)s, version %(version)s ({DISTRIBUTION})")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (also accepted after the command).")
@click.option("--inventory", "inventory_dir", default=None, metavar="DIR[:DIR]",
              help="Inventory directory (default ./inventory, env $DEPLOY_INVENTORY).")
@click.pass_context
def cli(ctx: click.Context, as_json: bool, inventory_dir: str | None) -> None:
    """deploy: turn a Proxmox VE GPU host into a tuned SGLang server and keep it that way.

    Exit codes: 0 ok, 1 a check failed, 2 usage or configuration error, 3 remote or connection error,
    129 hung up (SIGHUP), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
    """
    given = ctx.obj if isinstance(ctx.obj, AppContext) else None  # a unit test's, with its HTTP handler
    ctx.obj = AppContext(inventory_dirs=inventory_dir or str(default_inventory_dir()), as_json=as_json,
                         http=given.http if given is not None else None)


def main() -> None:
    """The `deploy` process. At its end the cyclic collector is told to leave every object alone (gc.freeze):
    the interpreter's teardown would walk the objects of ~600 modules once more, ~0.07 s of a converged run's CPU
    (tests/perf/client_cost.py), to free what the process's exit frees anyway. Objects are still released as the
    modules are cleared; only the collector's last passes are skipped. In-process callers (tests) use `cli`."""
    try:
        cli(prog_name="deploy")
    finally:
        codecache.save()
        gc.freeze()
