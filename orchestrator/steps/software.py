"""Inside the container: sglang at the profile's pinned version, model weights present, flags valid for it."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import Any

from orchestrator.errors import CheckFailed, ConfigError, RemoteError
from orchestrator.flags.schema import FlagSchema
from orchestrator.runlog import StepRecord
from orchestrator.steps.base import StepContext, mark_change, step
from orchestrator.steps.session import ensure_facts, refresh_ct_facts, unknown_until_started


@dataclass(frozen=True)
class FlagCheck:
    ok: bool
    error: str
    version: str | None
    schema: FlagSchema | None


def probe_source() -> str:
    return resources.files("orchestrator.probes").joinpath("flags_probe.py").read_text()


def container_flag_check(ctx: StepContext, argv: list[str]) -> FlagCheck:
    """Validate argv with the parser of the sglang installed in the container (one round trip).

    The probe travels on stdin; sglang is never imported on the operator's machine.
    """
    res = ctx.ct.run_python(ctx.profile.venv, probe_source(), ["sglang", json.dumps(argv)], tag="DEPLOY_PROBE_EOF",
                            timeout=120, what="flag validation in the container")
    try:
        data: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise RemoteError(f"flag validation in CT {ctx.vmid} printed no result: "
                          f"{(res.stderr or res.stdout).strip()[-300:]}",
                          fix=f"check that {ctx.ct.paths.venv_python(ctx.profile.venv)} exists and sglang imports",
                          host=ctx.host.name) from exc
    schema = FlagSchema.from_dump(data["actions"], version=str(data.get("version"))) if data.get("actions") else None
    return FlagCheck(bool(data.get("ok")), str(data.get("error") or ""), data.get("version"), schema)


@step("sglang_install", ct_facts=("sglang_version",))
def sglang_install(ctx: StepContext, record: StepRecord) -> None:
    """sglang in the profile's venv at the profile's pinned version (installed when missing)."""
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "the installed sglang version"):
        return
    want = ctx.profile.sglang_version
    out = ctx.facts.c("sglang_version")
    have = out.stdout.strip() if out is not None and out.rc == 0 else None
    record.details.update({"wanted": want, "installed": have})
    if have == want:
        record.summary = f"sglang {have} in {ctx.profile.venv}"
        return
    what = f"install sglang=={want} in {ctx.profile.venv} (found {have or 'none'})"
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    ctx.say(what)
    venv = shlex.quote(ctx.profile.venv)
    inner = (f"test -x {venv}/bin/python || python3 -m venv {venv}; "
             f"{venv}/bin/pip install --progress-bar off {shlex.quote('sglang==' + want)}")
    res = ctx.ct.run(inner, check=False, timeout=3600, what="pip install sglang",
                     progress=lambda line: ctx.say(f"  pip: {line}"))
    if res.rc != 0:
        raise RemoteError(f"pip install sglang=={want} failed: {(res.stderr or res.stdout).strip()[-500:]}",
                          fix="check the container's network/proxy or pre-install sglang in the venv",
                          host=ctx.host.name)
    refresh_ct_facts(ctx, "sglang_version")
    out = ctx.facts.c("sglang_version")
    have = out.stdout.strip() if out is not None and out.rc == 0 else None
    if have != want:
        raise CheckFailed(f"after installing, sglang reports {have}, wanted {want}", host=ctx.host.name,
                          fix="check for a second sglang on the venv's path")
    record.summary = f"installed sglang {have}"


@step("model_weights", ct_facts=("weights",))
def model_weights(ctx: StepContext, record: StepRecord) -> None:
    """Model weights present at the profile's model_path (downloaded with progress when missing)."""
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "whether the weights are present"):
        return
    prof = ctx.profile
    out = ctx.facts.c("weights")
    if out is not None and out.stdout.strip() == "present":
        record.summary = f"weights present at {prof.model_path}"
        return
    if prof.weights_repo is None:
        raise CheckFailed(f"no model weights at {prof.model_path} (no config.json) and no weights_repo to fetch",
                          fix="copy the weights there or set profiles.<name>.weights_repo", host=ctx.host.name)
    what = f"download {prof.weights_repo} to {prof.model_path}"
    if ctx.options.skip_weights:
        record.status = "skipped"
        record.summary = f"--skip-weights: would {what}"
        return
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    ctx.say(what + " (this can take long; progress is printed by huggingface-cli)")
    inner = (f"HF_HUB_ENABLE_HF_TRANSFER=0 {shlex.quote(prof.venv)}/bin/huggingface-cli download "
             f"{shlex.quote(prof.weights_repo)} --local-dir {shlex.quote(prof.model_path)}")
    res = ctx.ct.run(inner, check=False, timeout=24 * 3600, what="weights download",
                     progress=lambda line: ctx.say(f"  download: {line}"))
    if res.rc != 0:
        raise RemoteError(f"weights download failed: {(res.stderr or res.stdout).strip()[-500:]}",
                          fix="check network access to the model hub from the container, or copy the weights",
                          host=ctx.host.name)
    refresh_ct_facts(ctx, "weights")
    record.summary = f"downloaded {prof.weights_repo}"


def require_valid_flags(ctx: StepContext, argv: list[str]) -> FlagCheck:
    check = container_flag_check(ctx, argv)
    if not check.ok:
        raise ConfigError(f"sglang {check.version} in CT {ctx.vmid} rejects the flags: {check.error}",
                          fix="fix the flag set (deploy render shows the canonical names); nothing was changed",
                          host=ctx.host.name)
    return check
