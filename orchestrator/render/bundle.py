"""Everything that would be installed for one host: passthrough lines, sglang.service, sglang.env, secrets.yaml
(with an API key), one hash."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.flags import FlagSchema, FlagSet, canonicalize
from orchestrator.inventory.models import Host, ServerProfile
from orchestrator.parsers.devices import DeviceNode
from orchestrator.render.files import RenderedFile, sha256_text
from orchestrator.render.passthrough import Method, render_passthrough, resolve_method
from orchestrator.render.service import render_env, render_logging, render_secrets, render_unit


@dataclass(frozen=True)
class Bundle:
    files: tuple[RenderedFile, ...]
    sha256: str
    flags: FlagSet
    method: Method | None = None
    method_reason: str = ""
    notes: tuple[str, ...] = field(default=())

    def file(self, name: str) -> RenderedFile:
        for f in self.files:
            if f.name == name or f.name.startswith(name):
                return f
        raise KeyError(name)


def combined_sha256(files: Sequence[RenderedFile]) -> str:
    """One hash over (name, path, mode, body hash) of each file, in name order."""
    lines = sorted(f"{f.name}\t{f.remote_path}\t{f.mode_octal}\t{f.sha256}\n" for f in files)
    return sha256_text("".join(lines))


def render_bundle(host: Host, profile: ServerProfile, *, nodes: Sequence[DeviceNode] | None = None,
                  proc_devices: Mapping[str, int] | None = None, existing_conf: Mapping[str, str] | None = None,
                  method: str | None = None, pve_version: str | None = None,
                  schema: FlagSchema | None = None, flags: FlagSet | None = None, api_key: str | None = None,
                  release_id: str | None = None, venv: str | None = None, cache_dir: str | None = None,
                  cuda_home: str | None = None) -> Bundle:
    """Render all files. Without `nodes` the passthrough is left out (a flag rollout does not touch it).

    The flag set is `flags` when given, else the profile's flags canonicalised against `schema` (default: the
    packaged schema of profile.sglang_version). The unit runs `venv`'s sglang (the release's stack), by default
    the profile's venv. `cache_dir`: the release's kernel cache directory (orchestrator/caches.py), in sglang.env.
    `cuda_home`: the CUDA that stack carries, the unit's CUDA_HOME (render/service.py unit_cuda_home).
    """
    if flags is None:
        flags = canonicalize(profile.flags, schema or FlagSchema.load(profile.sglang_version))
    files: list[RenderedFile] = []
    chosen: Method | None = None
    reason = ""
    if nodes is not None:
        chosen, reason = resolve_method(method or host.container.passthrough, pve_version)
        files.append(render_passthrough(nodes, existing_conf or {}, proc_devices or {}, chosen,
                                        vmid=host.container.vmid))
    files.append(render_unit(profile, flags, release_id, venv, cuda_home))
    files.append(render_env(profile, api_key, flags, cache_dir))
    files.extend(f for f in (render_secrets(profile, api_key, flags), render_logging(profile, flags)) if f is not None)
    notes = list(flags.notes)
    notes.extend(f"--{w} is written as --{c}" for w, c in sorted(flags.renamed.items()))
    return Bundle(files=tuple(files), sha256=combined_sha256(files), flags=flags, method=chosen,
                  method_reason=reason, notes=tuple(notes))
