"""Pure renderers (Jinja templates shipped in orchestrator/templates/): passthrough lines, sglang.service, .env."""

from __future__ import annotations

from orchestrator.render.bundle import Bundle, combined_sha256, render_bundle
from orchestrator.render.files import (
    HEADER_MARK,
    RenderedFile,
    body_sha256,
    env_file_value,
    split_header,
    systemd_exec_arg,
)
from orchestrator.render.passthrough import (
    DevEntry,
    Method,
    dev_entries,
    raw_lines,
    render_passthrough,
    resolve_method,
)
from orchestrator.render.service import (
    API_KEY_VAR,
    ENV_PATH,
    LOGGING_PATH,
    SECRETS_PATH,
    UNIT_PATH,
    exec_start,
    launch_argv,
    render_env,
    render_logging,
    render_secrets,
    render_unit,
)

__all__ = [
    "API_KEY_VAR",
    "ENV_PATH",
    "HEADER_MARK",
    "LOGGING_PATH",
    "SECRETS_PATH",
    "UNIT_PATH",
    "Bundle",
    "DevEntry",
    "Method",
    "RenderedFile",
    "body_sha256",
    "combined_sha256",
    "dev_entries",
    "env_file_value",
    "exec_start",
    "launch_argv",
    "raw_lines",
    "render_bundle",
    "render_env",
    "render_logging",
    "render_passthrough",
    "render_secrets",
    "render_unit",
    "resolve_method",
    "split_header",
    "systemd_exec_arg",
]
