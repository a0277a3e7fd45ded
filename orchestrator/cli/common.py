"""Shared CLI plumbing: global options, target words, output in text or JSON, and error → exit code mapping.

Every command gets `--json` and `--inventory`; a command returns a payload dict (for --json) and prints its
human view through `Output`. Errors are DeployError subclasses; their exit_code is the process exit code.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from orchestrator.envelope import failure, usage_failure
from orchestrator.errors import ConfigError, DeployError, HungUp, Interrupted, Terminated, UsageError, did_you_mean
from orchestrator.local.paths import INVENTORY_ENV, default_inventory_dir
from orchestrator.redact import install_stream_redaction

# The inventory models (pydantic, the flag schemas), rich and the output layer are imported where they are used,
# not here: `deploy --help` and a usage error need none of them (tests/unit/test_lazy_imports.py).
if TYPE_CHECKING:
    from orchestrator.engine.progress import StepPrinter
    from orchestrator.inventory.models import Host, Inventory
    from orchestrator.remote.http import Transport
    from orchestrator.ui.output import Output

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class AppContext:
    inventory_dirs: str
    as_json: bool
    #: How the router, its workers and the webhook are reached (remote/http.py): None is real HTTP; a unit test
    #: that runs a command in this process passes a HandlerTransport (`cli.main(obj=AppContext(..., http=…))`).
    http: Transport | None = None

    @functools.cached_property
    def inventory(self) -> Inventory:
        from orchestrator.inventory.loader import load_inventory

        inventory = load_inventory(self.inventory_dirs)
        from orchestrator.store.store import configure_from_inventory  # the team store, or none (docs/team.md)

        configure_from_inventory(inventory.state_url, inventory.state_password_file,
                                 f"state_url in inventory {self.inventory_paths}")
        if not any(h.container.vmid_auto for h in inventory.hosts.values()):
            return inventory
        from orchestrator.inventory.auto_vmids import with_recalled_vmids

        return with_recalled_vmids(inventory)

    @property
    def inventory_paths(self) -> str:
        """The inventory directories as absolute paths, for lines that say whose data is shown."""
        return ":".join(str(Path(d).resolve()) for d in self.inventory_dirs.split(":") if d)

    @functools.cached_property
    def out(self) -> Output:
        """One per command: run_command prints the document the body emitted once its exit code is known."""
        from orchestrator.ui.output import Output

        return Output(self.as_json)

    def step_printer(self, *, quiet: bool = False) -> StepPrinter:
        """Step progress of a run; a fleet run's per-host context forwards it to the live view instead."""
        from orchestrator.engine.progress import StepPrinter

        return StepPrinter(self.out.console, enabled=not self.as_json and not quiet)


#: Commands that accept several hosts (group G, host a b, --all); see orchestrator.fleet.targets.
FLEET_COMMANDS = ("up", "plan", "status", "doctor", "verify-p2p", "history", "roll", "rollback")


def json_requested(args: list[str]) -> bool:
    """`--json` anywhere on the command line (before a `--`): click may refuse the line before it parsed it."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


class SuggestingGroup(click.Group):
    """A command group whose unknown command is a usage error naming the closest known one (difflib).

    With `--json` on the command line a usage error (click's UsageError: an unknown option or command, a missing
    argument, a bad value; exit 2) is the same JSON document as any failure (docs/json.md), on stdout.
    """

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        argv = list(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as err:
            self._usage_error(err, argv)
            raise
        ctx.meta.setdefault("deploy.argv", argv)
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            self._usage_error(err, list(ctx.meta.get("deploy.argv", [])))
            raise

    @staticmethod
    def _usage_error(err: click.UsageError, argv: list[str]) -> None:
        if not json_requested(argv):
            return
        cmd = err.ctx.command_path if err.ctx is not None else "deploy"
        install_stream_redaction()
        from orchestrator.ui.output import Output

        Output(True).write(usage_failure(err.format_message(), fix=f"see `{cmd} --help`", exit_code=err.exit_code))
        sys.exit(err.exit_code)

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = click.utils.make_str(args[0])
        known = self.list_commands(ctx)
        if name not in known and not name.startswith("-"):
            guess = did_you_mean(name, known)
            ctx.fail(f"No such command {name!r}." + (f" Did you mean {guess!r}?" if guess else "")
                     + f" Commands: {', '.join(known)}.")
        return super().resolve_command(ctx, args)


def parse_target(words: tuple[str, ...], *, required: bool = True) -> str | None:
    """One host in the user's grammar: `host ADDR`, or just `ADDR` / a host name (fleet words are refused here)."""
    from orchestrator.fleet.targets import parse_targets

    spec = parse_targets(words)
    if spec.fleet:
        raise UsageError(f"this command takes one host, got {spec.describe()}",
                         fix=f"name one host; groups, several hosts and --all work with {', '.join(FLEET_COMMANDS)}")
    if not spec.hosts:
        if required:
            raise UsageError("no host given",
                             fix="e.g. `deploy up host 10.1.230.174` or a host name from the inventory")
        return None
    return spec.hosts[0]


def resolve_host(app: AppContext, words: tuple[str, ...]) -> Host:
    """A missing target is fine when the inventory has exactly one host."""
    target = parse_target(words, required=False)
    inv = app.inventory
    if target is None:
        if len(inv.hosts) == 1:
            return next(iter(inv.hosts.values()))
        names = ", ".join(sorted(inv.hosts)) or "none"
        raise ConfigError(f"which host? the inventory has several ({names})", fix="add `host NAME`")
    return inv.find_host(target)


def common_options(func: F) -> F:
    """--json and --inventory on every command (also accepted before the command name)."""

    @click.option("--json", "as_json", is_flag=True, default=None, help="Print one JSON document.")
    @click.option("--inventory", "inventory_dir", default=None, metavar="DIR[:DIR]",
                  help=f"Inventory directory (default ./inventory, env ${INVENTORY_ENV}).")
    @click.pass_context
    @functools.wraps(func)
    def wrapper(ctx: click.Context, as_json: bool | None, inventory_dir: str | None, *args: Any,
                **kwargs: Any) -> Any:
        parent = ctx.find_object(AppContext)
        app = AppContext(
            inventory_dirs=inventory_dir or (parent.inventory_dirs if parent else str(default_inventory_dir())),
            as_json=bool(as_json) if as_json is not None else bool(parent and parent.as_json),
            http=parent.http if parent else None,
        )
        return run_command(app, func, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


class _SigTerm(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the run unwinds exactly as on Ctrl-C."""

    exit_code = 143


class _SigHup(KeyboardInterrupt):
    """SIGHUP (the terminal went away), unwound as Ctrl-C."""

    exit_code = 129


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _SigHup() if signum == signal.SIGHUP else _SigTerm()


@contextlib.contextmanager
def _settled() -> Iterator[None]:
    """While the outcome is written and the process exits: the command's body has ended, so a late Ctrl-C or SIGTERM
    no longer changes what happened (it would escape as a traceback and exit "interrupted" after a roll that
    finished). The old handlers come back afterwards, for an in-process caller."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def inventory_names(**params: str) -> Callable[[F], F]:
    """Check the options that name an inventory thing (`preset=PARAM`, `profile=PARAM`) before the body runs.

    Under @common_options and above @fleet_options: a typo is refused (exit 2, "did you mean") before any SSH
    connection, for one host and a fleet alike, whatever other options (--skip-bench) make of it later.
    """
    from orchestrator.inventory.models import Inventory

    lookups: dict[str, Callable[[Inventory, str], object]] = {"preset": Inventory.preset,
                                                              "profile": Inventory.profile}

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(app: AppContext, *args: Any, **kwargs: Any) -> Any:
            for kind, param in params.items():
                if kwargs.get(param) is not None:
                    lookups[kind](app.inventory, kwargs[param])
            return func(app, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def run_command(app: AppContext, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run a command body and turn DeployError into a clear message and the documented exit code.

    stdout and stderr are wrapped first, so nothing a command prints (progress, journal excerpts, tables,
    tracebacks) can carry a secret to the terminal.
    """
    install_stream_redaction()
    out = app.out
    out.hold = True
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        signal.signal(signal.SIGHUP, _on_sigterm)
    try:
        try:
            code = func(app, *args, **kwargs)
        except KeyboardInterrupt as stop:  # unwinds like Ctrl-C: `finally` blocks release the lock, close SSH
            cls, said = ((HungUp, "hung up (SIGHUP)") if isinstance(stop, _SigHup)
                         else (Terminated, "terminated (SIGTERM)") if isinstance(stop, _SigTerm)
                         else (Interrupted, "interrupted (Ctrl-C)"))
            raise cls(f"{said}; run the command again: an interrupted up or roll is undone by the next one "
                      "(a fleet roll: `deploy roll group G --resume` or `deploy rollback group G`)") from None
        except DeployError:
            raise
        except Exception as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                if not app.as_json:
                    raise
                # --json still gets its one document on stdout; the traceback goes to stderr beside it
                import traceback
                traceback.print_exc(file=sys.stderr)
            raise internal_error(exc) from None
    except DeployError as err:
        with _settled():
            if app.as_json:
                out.write(failure(err, out.held))
            else:
                from rich.console import Console
                from rich.markup import escape

                # soft_wrap: a fix line (an `ssh-keygen -R …` command) stays one line to copy; the terminal wraps it.
                Console(stderr=True, highlight=False, soft_wrap=True).print(
                    f"[bold red]error:[/] {escape(str(err))}", markup=True)
            sys.exit(err.exit_code)
    with _settled():
        out.finish(int(code or 0))
        sys.exit(int(code or 0))


#: `DEPLOY_DEBUG=1`: an internal error shows its Python traceback instead of the one-line report (with --json: on
#: stderr, beside the failure document on stdout).
DEBUG_ENV = "DEPLOY_DEBUG"


def internal_error(exc: Exception) -> DeployError:
    """An exception that no layer turned into a DeployError is a bug in deploy: one line for the user, and the
    traceback in a private file (orchestrator.crash) that the fix names, so the report can carry it."""
    from orchestrator.local.crash import describe_bug

    what, path = describe_bug(exc)
    saved = f"; its traceback is in {path}" if path else f"; {DEBUG_ENV}=1 shows its traceback"
    return DeployError(what, fix=f"this is a bug in deploy, not in your host or inventory: please report it{saved}",
                       details={"exception": type(exc).__name__})


def existing_file(path: str | None, what: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} {p} does not exist or is not a file", fix="check the path")
    return p


#: Strict host key checking is the default; trusting a first-seen key is the user's explicit choice.
tofu_option = click.option("--tofu", is_flag=True, help="Trust an unknown SSH host key on first use and record it.")

#: The bench ledger is one file per machine, shared by every inventory on it; views show the inventory's hosts.
all_inventories_option = click.option(
    "--all-inventories", is_flag=True,
    help="Every run in this machine's ledger, not only those of the inventory's hosts.")


def is_router_worker(inventory: Inventory, host: str) -> bool:
    """Whether the inventory's router has `host` among its workers (the router's modules load only then): a
    single-host command that restarts it drains it first (fleet/rotation.py)."""
    if inventory.router is None:
        return False
    from orchestrator.commands.rotation import routes_to

    return routes_to(inventory, host)
