"""The watchdog's files (docs/gates.md, "Watchdog"): its timer and oneshot unit, its config and its program.

Pure: a profile in, RenderedFiles out. `orchestrator.steps.watchdog` installs them when their hashes differ.
"""

from __future__ import annotations

import json

from orchestrator.inventory.models import ServerProfile
from orchestrator.layout import PATHS
from orchestrator.render.files import RenderedFile, render_template, sha256_text, split_header
from orchestrator.resources import module_source

TIMER = "sglang-watchdog.timer"
SERVICE = "sglang-watchdog.service"
SCRIPT = "orchestrator.watchdog.probe"


def _file(name: str, path: str, mode: int, content: str) -> RenderedFile:
    return RenderedFile(name=name, remote_path=path, mode=mode, content=content,
                        sha256=sha256_text(split_header(content)[1]))


def check_now_script() -> str:
    """Shell lines that run one watchdog check now, when its timer is active, and wait for it. Appended to a "kept"
    verdict's script: the state `deploy status` shows right after a roll then describes the release just verified,
    not the restart the last timer tick caught (no extra round trip; a failing check never fails the verdict)."""
    return (f"if systemctl is-active --quiet {TIMER}; then "
            f"timeout 60 systemctl start {SERVICE} >/dev/null 2>&1 || true; fi\n")


def watchdog_config(profile: ServerProfile) -> dict[str, object]:
    """What one check needs (orchestrator/watchdog/probe.py `Config`); no secret: the key stays in
    sglang.env, which the check reads as root."""
    w = profile.watchdog
    host = "127.0.0.1" if profile.host in ("0.0.0.0", "::") else profile.host
    return {"base": f"http://{host}:{profile.port}", "unit": PATHS.unit_name, "env_path": PATHS.env_path,
            "state_path": PATHS.watchdog_state, "stall_s": float(w.stall_s),
            "probe_timeout_s": float(w.probe_timeout_s), "health_timeout_s": float(profile.health_probe_timeout_s),
            "restart_budget": w.restart_budget, "budget_window_s": float(w.budget_window_s)}


def check_timeout_s(profile: ServerProfile) -> int:
    """One check's bound (its unit's TimeoutStartSec): /health may take the profile's health probe timeout (sglang's
    blocks behind a long prefill), then the tiny generation and /metrics their own, and a margin."""
    return 2 * profile.watchdog.probe_timeout_s + profile.health_probe_timeout_s + 30


def watchdog_files(profile: ServerProfile) -> list[RenderedFile]:
    """Timer, service, config and program, in the order they are written (the units last)."""
    w = profile.watchdog
    config = json.dumps(watchdog_config(profile), indent=1, sort_keys=True) + "\n"
    service = render_template("sglang-watchdog.service.j2", unit=PATHS.unit_name, state_path=PATHS.watchdog_state,
                              python=PATHS.venv_python(profile.venv), script=PATHS.watchdog_script,
                              config=PATHS.watchdog_config, timeout_s=check_timeout_s(profile))
    timer = render_template("sglang-watchdog.timer.j2", interval_s=w.interval_s)
    return [_file("watchdog.py", PATHS.watchdog_script, 0o600, module_source(SCRIPT)),
            _file("config.json", PATHS.watchdog_config, 0o600, config),
            _file(SERVICE, PATHS.watchdog_unit_path, 0o644, service),
            _file(TIMER, PATHS.watchdog_timer_path, 0o644, timer)]


def files_sha(files: list[RenderedFile]) -> str:
    """One hash over every file's path, mode and body: what the `watchdog` fact compares."""
    return sha256_text("".join(f"{f.remote_path} {f.mode_octal} {f.sha256}\n" for f in files))
