"""One-line summaries of a host's single-host --json payload, for the fleet summary table. Pure."""

from __future__ import annotations

from typing import Any

Payload = dict[str, Any]


def status_detail(report: Payload) -> str:
    return (f"release {report.get('release') or 'none'} ({report.get('verdict') or 'unverified'}), "
            f"sglang {report.get('active') or '-'}, /health {report.get('health') or '-'}"
            + (f", watchdog {(report.get('watchdog') or {}).get('state')}" if report.get("watchdog") else ""))


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
