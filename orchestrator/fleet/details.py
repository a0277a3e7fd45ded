"""One-line summaries for the fleet tables: a host's single-host --json payload, a fleet roll's router column. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Payload = dict[str, Any]


def status_detail(report: Payload) -> str:
    return (f"release {report.get('release') or 'none'} ({report.get('verdict') or 'unverified'}), "
            f"sglang {report.get('active') or '-'}, /health {report.get('health') or '-'}"
            + (f", watchdog {(report.get('watchdog') or {}).get('state')}" if report.get("watchdog") else "")
            + hardware_detail(report.get("hardware")))


def hardware_detail(hardware: object) -> str:
    """", GPU hardware: GPU 2 reboot_host" when a GPU has a fault (HardwareState.to_dict), else nothing."""
    if not isinstance(hardware, dict):
        return ""
    faulty = [g for g in hardware.get("gpus") or [] if g.get("faults")]
    if not faulty:
        return ""
    return ", GPU hardware: " + ", ".join(
        f"GPU {g['gpu'] if g.get('gpu') is not None else g.get('bus_id')} {g.get('action')}" for g in faulty)


def doctor_detail(report: Payload) -> str:
    findings = report.get("findings") or []
    bad = [f"{f.get('check')} {f.get('status')}" for f in findings if f.get("status") != "ok"]
    return f"{report.get('status', '?')}" + (f": {', '.join(bad)}" if bad else "")


def p2p_detail(report: Payload) -> str:
    verdict = report.get("verdict") or {}
    text = f"P2P {verdict.get('status', '?')} ({verdict.get('p2p', '?')}, {len(verdict.get('gpus') or [])} GPUs)"
    match = report.get("matches_host")
    if isinstance(match, dict) and not match.get("same", True):
        text += "; container topology differs from the host's"
    return text


def history_detail(report: Payload) -> str:
    if "runs" in report:  # history --bench: local ledger runs
        return f"{len(report['runs'])} bench run(s)"
    releases = report.get("releases") or []
    current = report.get("current")
    row = next((r for r in releases if r.get("id") == current), None)
    if row is None:
        return f"current {current or 'none'}, {len(releases)} release(s)"
    meta, verdict = row.get("meta") or {}, row.get("verdict") or {}
    diff = meta.get("flag_diff") or []
    changes = ", ".join(f"{k}: {a}→{b}" for k, a, b in diff) if diff else "profile flags"
    figures = verdict.get("candidate") or {}
    tput = figures.get("output_throughput")
    measured = (f", {tput:.1f} tok/s ({verdict.get('preset') or '?'})" if isinstance(tput, int | float) else "")
    return (f"current {current} ({verdict.get('verdict', 'unverified')}, {meta.get('source') or '-'}: {changes}"
            f"{measured}), {len(releases)} release(s)")


@dataclass
class RouterColumn:
    """A fleet-roll host's router column: what its drain did (a past fact) and ONE statement of where the host
    is in the router now.

    Each later event (the add-back after an interrupted roll, a rollback's re-add, --resume finding it missing)
    replaces `now`; none is appended to an earlier one. Appending made a SIGTERMed roll's column read "left out of
    the router after the failure (add it back once checked); was not in the router: added back, healthy": both
    halves cannot be true at once.
    """

    drained: str = ""
    now: str = ""

    def text(self) -> str:
        return "; ".join(part for part in (self.drained, self.now) if part)


def left_out(*, interrupted: bool) -> str:
    """Out of the router after the host's roll stopped: a failure, or an interruption (Ctrl-C, SIGTERM, SIGHUP:
    the host was not found at fault, so nothing asks the operator to check it)."""
    if interrupted:
        return "out of the router: its roll was interrupted (--resume checks it and adds it back)"
    return "left out of the router after the failure (add it back once checked)"


def added_back(took_s: float, reach: str, *, was_out: str) -> str:
    """Back in the router after the same checks as a roll's add-back. `was_out`: this run's own statement that it
    was out ('' when the router simply did not list it, e.g. at --resume)."""
    how = "checked and added back" if was_out else "was not in the router: added back"
    return f"{how}, healthy after {took_s:.1f} s" + (f"; {reach}" if reach else "")


def after_undo(failed: str, reverted: str | None, restore_error: str | None) -> str:
    """Where a host is after its new release failed the router's checks (`failed`) and was undone: `reverted`
    is the rollback's failure (None: rolled back), `restore_error` the re-add's (None: back in)."""
    if reverted is not None:
        return f"NOT back in the router: {failed}; rolling back failed too: {reverted}"
    if restore_error is not None:
        return f"NOT back in the router: {failed}; rolled back, and still out of the router: {restore_error}"
    return f"failed the router's checks on the new release ({failed}): rolled back to the previous release and " \
           "back in the router"
