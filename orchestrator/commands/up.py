"""`deploy up` / `deploy plan` on one host as a typed function: preflight, then the playbook run to its end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.commands.filing import file_runs, filed_if_stopped
from orchestrator.commands.result import RunResult
from orchestrator.engine.runner import ProgressFn, run_playbook_to_end
from orchestrator.engine.step import RunOptions
from orchestrator.errors import DeployError
from orchestrator.inventory.models import Host, Inventory, hf_token_for


def preflight(inventory: Inventory, host: Host) -> None:
    """Refuse a bad inventory or flag set before any remote change."""
    profile = inventory.profile_for(host)
    from orchestrator.flags import FlagSchema

    try:
        if profile.sglang_version in FlagSchema.known_versions():
            from orchestrator.flags import canonicalize

            canonicalize(profile.flags, FlagSchema.load(profile.sglang_version))
        for secret in (profile.api_key, hf_token_for(host, profile)):
            if secret is not None:
                secret.read()
        if host.pve.api is not None:
            host.pve.api.token_secret.read()
    except DeployError as err:
        raise err.at(host=host.name, step="preflight") from None


@dataclass(frozen=True)
class UpRequest:
    """`playbook`: a shipped name (orchestrator/playbooks/NAME.yaml) or the path of a copied, edited one."""

    host: Host
    playbook: str
    options: RunOptions


@dataclass(frozen=True)
class UpResult(RunResult):
    """The run's report, the command line it records, and the note a dry run adds (a keyless server on a LAN)."""

    command: str = ""
    note: str | None = None

    def payload(self) -> dict[str, Any]:
        payload = self.report.to_dict()
        payload["command"] = self.command
        if self.note is not None:
            payload["notes"] = [self.note]
        return payload


def up_host(inventory: Inventory, request: UpRequest, *, progress: ProgressFn | None = None,
            say: Callable[[str], None] | None = None) -> UpResult:
    """Converge (or plan) one host; a failed step ends the run with the result's `error` set, a refused input
    raises before any remote change."""
    host, options = request.host, request.options
    preflight(inventory, host)
    with filed_if_stopped(say):
        report = run_playbook_to_end(request.playbook, host, inventory, options, progress=progress, say=say)
    file_runs(report, say)  # the ledger, after the gates have judged the run
    from orchestrator.verdicts.exposure import keyless_on_lan

    note = keyless_on_lan(host.profile, inventory.profile_for(host)) if options.dry_run else None
    return UpResult(report, command=options.command, note=note)
