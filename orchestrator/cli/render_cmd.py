"""`deploy render`: offline view of what `up`/`roll` would install on a host, from saved host output files."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.common import AppContext, common_options, existing_file, resolve_host
from orchestrator.errors import ConfigError, DeployError
from orchestrator.flags import FlagSchema
from orchestrator.parsers import ParseError
from orchestrator.parsers.devices import DeviceNode, parse_dev_listing, parse_proc_devices
from orchestrator.render import Bundle, render_bundle
from orchestrator.render.service import public_flags, secret_flags

PLACEHOLDER_KEY = "api-key-not-available-offline"

HELP = """Print the passthrough lines, sglang.service and sglang.env that would be installed on a host.

Offline: the device nodes and majors come from saved host output, captured on the PVE host with
`ls -l /dev/nvidia* /dev/nvidia-caps/*` (--devices-file) and `cat /proc/devices` (--proc-devices-file).
Live rendering from the host is `deploy plan`. Secrets are never printed.
"""


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc}", fix="check the path") from exc


def parse_pve_conf(text: str) -> dict[str, str]:
    """`key: value` lines of a saved /etc/pve/lxc/<vmid>.conf (main section only; comments skipped)."""
    conf: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            break  # snapshot sections
        if not stripped or stripped.startswith("#") or ":" not in stripped:
            continue
        key, _, value = stripped.partition(":")
        conf.setdefault(key.strip(), value.strip())
    return conf


def _load_devices(devices_file: str | None, proc_file: str | None) -> tuple[list[DeviceNode], dict[str, int]]:
    dev_path = existing_file(devices_file, "--devices-file")
    proc_path = existing_file(proc_file, "--proc-devices-file")
    if dev_path is None or proc_path is None:
        missing = " and ".join(n for n, p in (("--devices-file", dev_path), ("--proc-devices-file", proc_path))
                               if p is None)
        raise ConfigError(
            f"render works offline and needs {missing}",
            fix="on the PVE host save `ls -l /dev/nvidia* /dev/nvidia-caps/* > ls-dev-nvidia.txt` and "
                "`cat /proc/devices > proc-devices.txt`, then pass --devices-file ls-dev-nvidia.txt "
                "--proc-devices-file proc-devices.txt (or use `deploy plan` to render live from the host)")
    try:
        nodes = parse_dev_listing(_read(dev_path, "--devices-file"))
    except ParseError as exc:
        raise ConfigError(f"--devices-file {dev_path}: {exc}",
                          fix="save `ls -l /dev/nvidia* /dev/nvidia-caps/*`") from exc
    try:
        majors = parse_proc_devices(_read(proc_path, "--proc-devices-file"))
    except ParseError as exc:
        raise ConfigError(f"--proc-devices-file {proc_path}: {exc}", fix="save `cat /proc/devices`") from exc
    return nodes, majors


@click.command(name="render", help=HELP)
@click.argument("target", nargs=-1)
@click.option("--devices-file", metavar="FILE", help="Saved `ls -l /dev/nvidia* /dev/nvidia-caps/*` of the host.")
@click.option("--proc-devices-file", metavar="FILE", help="Saved `/proc/devices` of the host.")
@click.option("--conf-file", metavar="FILE",
              help="Saved /etc/pve/lxc/<vmid>.conf: devN indices used by non-NVIDIA devices are skipped.")
@click.option("--pve-version", metavar="X.Y", help="PVE version: decides devN (≥ 8.1) or raw-lxc for --method auto.")
@click.option("--method", type=click.Choice(["auto", "devN", "raw-lxc"]), default=None,
              help="Passthrough method (default: the host's container.passthrough).")
@click.option("--sglang-version", metavar="V", help="Validate flags against this sglang schema (default: profile's).")
@click.option("--release-id", metavar="ID", default=None, help="Release id written in the unit header.")
@common_options
def render(app: AppContext, target: tuple[str, ...], devices_file: str | None, proc_devices_file: str | None,
           conf_file: str | None, pve_version: str | None, method: str | None, sglang_version: str | None,
           release_id: str | None) -> int:
    host = resolve_host(app, target)
    profile = app.inventory.profile_for(host)
    try:
        nodes, majors = _load_devices(devices_file, proc_devices_file)
        conf_path = existing_file(conf_file, "--conf-file")
        existing = parse_pve_conf(_read(conf_path, "--conf-file")) if conf_path else {}
        version = sglang_version or profile.sglang_version
        schema = FlagSchema.load(version)
        notes: list[str] = []
        api_key: str | None = None
        if profile.api_key is not None:
            try:
                api_key = profile.api_key.read()
            except ConfigError:
                api_key = PLACEHOLDER_KEY
                notes.append(f"API key ({profile.api_key.describe()}) not readable here: sglang.env rendered with a "
                             "placeholder, so its sha256 differs from the installed file")
        bundle = render_bundle(host, profile, nodes=nodes, proc_devices=majors, existing_conf=existing,
                               method=method, pve_version=pve_version, schema=schema, api_key=api_key,
                               release_id=release_id)
    except DeployError as err:
        raise err.at(host=host.name, step="render") from None
    notes = [*bundle.notes, *notes]
    if version != profile.sglang_version:
        notes.insert(0, f"flags validated against sglang {version}, not the profile's {profile.sglang_version}")
    _print(app, host.name, host.address, host.profile, version, bundle, notes)
    app.out.emit({
        "ok": True,
        "host": host.name,
        "address": host.address,
        "profile": host.profile,
        "sglang_version": version,
        "method": bundle.method,
        "method_reason": bundle.method_reason,
        "flags": public_flags(profile, bundle.flags),
        "argv": bundle.flags.argv(without=secret_flags(profile, bundle.flags)),
        "renamed": dict(bundle.flags.renamed),
        "notes": notes,
        "sha256": bundle.sha256,
        "files": [f.to_dict() for f in bundle.files],
    })
    return 0


def _print(app: AppContext, name: str, address: str, profile: str, version: str, bundle: Bundle,
           notes: list[str]) -> None:
    out = app.out
    out.line(f"host {name} ({address})  profile {profile}  sglang {version}", style="bold")
    out.line(f"passthrough: {bundle.method} — {bundle.method_reason}")
    for note in notes:
        out.line(f"note: {note}", style="yellow")
    for f in bundle.files:
        safe = f.redacted()
        secret = "  [secret redacted]" if f.has_secret else ""
        out.line("")
        out.line(f"── {f.name} → {f.remote_path}  mode {f.mode_octal}  sha256 {f.sha256}{secret}", style="bold cyan")
        out.line(safe.content.rstrip("\n"))
    out.line("")
    out.line(f"bundle sha256 {bundle.sha256}", style="bold")
