"""`deploy lock PROFILE --host H`: resolve the profile's stack in H's container and write locks/PROFILE.txt."""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.common import AppContext, common_options, resolve_host, tofu_option
from orchestrator.cli.run import run_with_progress
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError, DeployError
from orchestrator.inventory.loader import lock_path
from orchestrator.local.files import write_file
from orchestrator.stacks.lock import Lock, normalize, parse_lock


def lock_changes(old: Lock | None, new: Lock) -> list[str]:
    """What a new lock changes against the old one, by distribution: `+name==v`, `-name==v`, `name: a → b`, and
    `name==v: another build (sha256 …)` when only the hash moved (the index published a new file)."""
    before = {normalize(e.name): e for e in (old.entries if old else ())}
    after = {normalize(e.name): e for e in new.entries}
    out = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if a is None and b is not None:
            out.append(f"+{b.name}=={b.version}")
        elif b is None and a is not None:
            out.append(f"-{a.name}=={a.version}")
        elif a is not None and b is not None and a.version != b.version:
            out.append(f"{b.name}: {a.version} → {b.version}")
        elif a is not None and b is not None and a.sha256 != b.sha256:
            out.append(f"{b.name}=={b.version}: another build (sha256 {a.sha256[:12]}… → {b.sha256[:12]}…)")
    return out


@click.command("lock")
@click.argument("profile")
@click.option("--host", "host_name", required=True, metavar="HOST", help="Resolve in this host's container.")
@tofu_option
@common_options
def lock(app: AppContext, profile: str, host_name: str, tofu: bool) -> int:
    """Pin every distribution of PROFILE's stack with its sha256, resolved in HOST's container (like pip-tools).

    Writes locks/PROFILE.txt into the (first) inventory directory, to review and commit like any lock file.
    Every later install of that profile's stack uses pip --require-hashes against it (docs/stacks.md#locks).
    Nothing on the host changes.
    """
    host = resolve_host(app, ("host", host_name))
    app.inventory.profile(profile)  # a known profile name, or exit 2 naming the known ones
    if host.profile != profile:
        raise ConfigError(f"host {host.name} runs profile {host.profile}, not {profile}: the lock is resolved against "
                          "the host's own index and container", fix=f"name a host of profile {profile}")
    old_text = app.inventory.profiles[profile].lock_text
    report = run_with_progress(app, ("host", host.name), "stack-lock",
                               RunOptions(tofu=tofu, command="deploy lock"), quiet=True)
    text = report.state.lock_text
    if text is None:
        raise DeployError("the stack-lock playbook resolved nothing", fix="check that it runs the stack_lock step",
                          host=host.name, step="stack_lock")
    path = lock_path(Path(app.inventory_dirs.split(":")[0]), profile)
    new = parse_lock(text, str(path))
    changes = lock_changes(parse_lock(old_text, str(path)) if old_text else None, new)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, text)
    app.out.emit({"ok": True, "host": host.name, "profile": profile, "lock_file": str(path),
                  "distributions": len(new.entries), "changes": changes})
    app.out.line(f"wrote {path}: {len(new.entries)} distributions of {report.steps[-1].summary.split(' of ', 1)[-1]}"
                 + ("" if old_text is None else f"; {len(changes)} change(s) against the previous lock"
                    + (": " + ", ".join(changes) if changes else "")))
    app.out.line(f"review and commit it; every `deploy up` of profile {profile} now installs exactly these files "
                 "(pip --require-hashes)")
    return 0
