"""`deploy watch group G`: GPU faults acted on without an operator command (orchestrator/fleet/watch.py)."""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from types import FrameType

import click

from orchestrator.cli.common import AppContext, common_options, tofu_option
from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.state import RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError, DeployError
from orchestrator.fleet.watch import Reading, Watch, WatchState, run_watch
from orchestrator.hardware.policy import Remedy
from orchestrator.monitoring.notify import Notifier
from orchestrator.store.store import ledger as store_ledger

#: The playbooks of each remedy, run in order on the drained host (orchestrator/playbooks/remedy-*.yaml).
#: How long an ending watch waits for its last posts (a receiver that hangs must not hold up a `systemctl stop`).
NOTIFY_EXIT_WAIT_S = 10.0
REMEDY_PLAYBOOKS: dict[str, tuple[str, ...]] = {"restart": ("remedy-restart",),
                                                "reboot": ("remedy-reboot", "remedy-verify")}


def print_watch_unit(app: AppContext, group: str, interval_s: float, drain_timeout: float) -> int:
    """The unit for this group, started by this very interpreter (the venv deploy runs from), with the inventory
    and state directory this command resolved, as absolute paths."""
    from orchestrator.local.paths import state_dir
    from orchestrator.render.watch_unit import render_watch_unit, watch_unit_name
    from orchestrator.store import store

    team = store.settings()
    if team is not None:  # the URL (no password in it) and the password file (0600) checked as a connection would
        from orchestrator.store.pg import connect_params

        connect_params(team)
    pw_file = team.password_file if team is not None else None
    text = render_watch_unit(program=[sys.executable, "-m", "orchestrator"], group=group, interval_s=interval_s,
                             drain_timeout_s=drain_timeout, inventory=app.inventory_paths,
                             state_dir=str(state_dir().resolve()),
                             reboot_timeout_s=app.inventory.health.reboot_timeout_s,
                             state_url=team.url if team is not None else None,
                             state_password_file=str(pw_file.resolve()) if pw_file is not None else None)
    app.out.emit({"unit": watch_unit_name(group), "content": text})
    if not app.out.as_json:
        click.echo(text, nl=False)  # as is: the unit file, byte for byte
    return 0


@click.command("watch")
@click.argument("word", type=click.Choice(["group"]))
@click.argument("group")
@click.option("--once", is_flag=True, help="One cycle, then exit (for a systemd timer or cron).")
@click.option("--interval", "interval_s", type=click.FloatRange(min=5), default=30.0, show_default=True,
              help="Seconds between cycles.")
@click.option("--for", "for_s", type=click.FloatRange(min=1), default=None,
              help="Stop after this many seconds (default: until SIGTERM or Ctrl-C).")
@click.option("--drain-timeout", type=float, default=120.0, show_default=True,
              help="Seconds to wait for a cordoned host's in-flight requests.")
@click.option("--unit", "print_unit", is_flag=True,
              help="Print the systemd unit that runs this watch (with these options) and exit; nothing runs.")
@tofu_option
@common_options
def watch(app: AppContext, word: str, group: str, once: bool, interval_s: float, for_s: float | None,
          drain_timeout: float, tofu: bool, print_unit: bool) -> int:
    """Read every host's GPU sensors each cycle; a host with a fault to act on is drained out of the router
    (cordoned), remedied where the inventory's `health:` policy allows it (restart sglang; reboot the node only with
    `health: {reboot: true}`), verified, and put back once its sensors read clean and it serves. Exits 1 when the
    last cycle left a host out with a fault. e.g. `deploy watch group prod --interval 30` under systemd, or
    `--once` from a timer."""
    inv = app.inventory
    hosts = inv.group_hosts(group)
    if not hosts:
        raise ConfigError(f"group {group} has no hosts", fix="list the groups in the inventory's groups: section")
    if inv.router is None:
        raise ConfigError("deploy watch cordons hosts out of the router, and the inventory has no router: section",
                          fix="add the router (docs/fleet.md, 'The router'); `deploy doctor group G` reports "
                              "faults without one")
    if print_unit:
        return print_watch_unit(app, group, interval_s, drain_timeout)
    by_name = {h.name: h for h in hosts}

    def read(name: str) -> Reading:
        report = run_playbook_to_end("status", by_name[name], inv,
                                     RunOptions(tofu=tofu, command=f"deploy watch group {group}"))
        st = report.state
        serving = st.status is not None and st.status.health == "200"
        error = report.failure.what if isinstance(report.failure, DeployError) else None
        return Reading(name, st.hardware if st.hardware is not None and st.hardware.gpus else None, serving, error)

    def run_books(name: str, books: tuple[str, ...], what: str, cursor: str | None) -> str:
        verified: list[str] = []
        for book in books:
            report = run_playbook_to_end(book, by_name[name], inv,
                                         RunOptions(tofu=tofu, command=f"deploy watch group {group} ({what})"),
                                         inputs=RunInputs(kernel_cursor=cursor, want_bandwidth=True,
                                                          bandwidth_gate=True))
            if report.failure is not None:
                raise report.failure
            verified += [f"{s.name}: {s.summary}" for s in report.steps
                         if s.name in ("reboot_node", "host_prereqs", "container_gpus", "health", "smoke",
                                       "correctness_check", "p2p_bandwidth")]
        return "; ".join(verified)

    def remedy(name: str, kind: Remedy, cursor: str | None) -> str:
        return run_books(name, REMEDY_PLAYBOOKS[kind], kind, cursor)

    def verify(name: str) -> str:
        return run_books(name, ("remedy-verify",), "verify", None)

    ledger = store_ledger()
    stop = threading.Event()

    def _stop(_sig: int, _frame: FrameType | None) -> None:
        # Set from a bare thread: the handler runs in the main thread, which may be inside `stop.wait()` holding
        # the Event's lock at that moment (Event.set there would wait on its own thread's lock for good).
        _thread.start_new_thread(stop.set, ())

    previous = signal.signal(signal.SIGTERM, _stop)
    notifier = Notifier(app.out.line, http=app.http)
    try:
        code = run_watch(Watch(inv, [h.name for h in hosts], read, app.out.line, WatchState(group),
                               drain_timeout_s=drain_timeout, remedy=remedy, record=ledger.record_event,
                               verify=verify, notifier=notifier, http=app.http),
                         once=once, interval_s=interval_s, for_s=for_s,
                         stop=stop)
    except KeyboardInterrupt:
        code = 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        notifier.close(wait_s=NOTIFY_EXIT_WAIT_S)
    return code
