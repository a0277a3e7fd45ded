"""`deploy state status|migrate`: which state store this machine uses, and moving its state into a team's.

Why: with a team store (docs/team.md) the claims, ledger and records of every operator live in one PostgreSQL;
an operator needs to see which store a command would use, who holds which claim now, and to bring the ledger and
records kept so far on this machine into the team's store once.
"""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.common import AppContext, SuggestingGroup, common_options
from orchestrator.errors import ConfigError
from orchestrator.store import store


@click.group("state", cls=SuggestingGroup)
def state() -> None:
    """The state store: this machine's files (default) or a team's PostgreSQL (DEPLOY_STATE_URL, state_url)."""


def _read_inventory_setting(app: AppContext) -> None:
    """The inventory's state_url, when there is an inventory (the command works without one)."""
    if any(Path(d).is_dir() for d in app.inventory_dirs.split(":") if d):
        app.inventory  # noqa: B018 - reading it configures the store (cli/common.py)
    else:
        store.configure_from_inventory(None, None, "")


@state.command("status")
@common_options
def status(app: AppContext) -> int:
    """Which store this machine uses, its schema version, and who holds which claim now."""
    _read_inventory_setting(app)
    s = store.current().status()
    claims = [{"name": c.name, "exclusive": c.exclusive,
               **({"user": c.holder.user, "machine": c.holder.machine, "pid": c.holder.pid,
                   "command": c.holder.command, "run": c.holder.run_id, "since": c.holder.since}
                  if c.holder is not None and c.holder.user else
                  {"holder": c.holder.command if c.holder else None})} for c in s.claims]
    app.out.emit({"ok": True, "exit_code": 0, "store": s.kind, "where": s.where, "schema_version": s.schema_version,
                  "tool_schema_version": s.tool_schema_version, "claims": claims})
    named = store.settings()
    app.out.line(f"store: {s.where}" + (f", the team's PostgreSQL (named by {named.origin})" if named is not None
                                         else ": the default, no team store named (docs/team.md)"))
    app.out.line(f"schema version: {s.schema_version} (this tool's: {s.tool_schema_version})")
    if not s.claims:
        app.out.line("claims: none held")
    for c in s.claims:
        how = "exclusive" if c.exclusive else "shared"
        who = c.holder.text() if c.holder is not None and c.holder.user else (
            c.holder.command if c.holder else "a single-host roll or rollback")
        app.out.line(f"claim {c.name} ({how}): {who}")
    return 0


@state.command("migrate")
@click.option("--to", "url", required=True, metavar="URL",
              help="The team store's PostgreSQL URL (no password in it: DEPLOY_STATE_PASSWORD_FILE or PGPASSFILE).")
@click.option("--password-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A 0600 file holding the store's password (default: $DEPLOY_STATE_PASSWORD_FILE).")
@common_options
def migrate(app: AppContext, url: str, password_file: Path | None) -> int:
    """Copy this machine's ledger and records (fleet rolls, tunes, the watch's cordons) into the team store.

    Once and idempotent: a run or record the store has already (same id) is kept as it is there, so a second
    migrate copies nothing. This machine's files are left in place (they are no longer read while a store is set).
    """
    import os

    from orchestrator.ledger.sqlite import Ledger, default_ledger_path
    from orchestrator.store.pg import PgStore

    if not password_file and os.environ.get(store.PASSWORD_FILE_ENV):
        password_file = Path(os.environ[store.PASSWORD_FILE_ENV])
    target = PgStore.open(store.StoreSettings(url, password_file, "--to"))
    try:
        ledger = default_ledger_path()
        if not ledger.exists() and not any(store.LocalRecords().items(k) for k in store.RECORD_KINDS):
            raise ConfigError(f"nothing to migrate: no ledger or record under {ledger.parent}",
                              fix="DEPLOY_STATE_DIR names another state dir? nothing was copied")
        if ledger.exists():
            Ledger(ledger)  # an older tool's ledger is upgraded in place first (its own migrations)
        report = target.import_local(ledger, store.LocalRecords())
    finally:
        target.close()
    copied = {"runs": report.runs, "tune_runs": report.tune_runs, "host_events": report.host_events,
              **{f"records_{k}": n for k, n in report.records.items()}}
    app.out.emit({"ok": True, "exit_code": 0, "to": target.where, "copied": copied, "already_there": report.already})
    app.out.line(f"copied to {target.where}: " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in copied.items())
                 + f"; {report.already} already there (kept)")
    app.out.line(f"next: set DEPLOY_STATE_URL={url} (or state_url: in the inventory) on every operator machine")
    return 0
