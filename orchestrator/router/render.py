"""The router's files, rendered: its unit, its launcher and its key file, from the inventory's router section. Pure.

Facts about the pinned releases that shape this module (checked on the installed wheels, sglang-router 0.3.2 and
smg 1.13.0; see docs/fleet.md "The router"): `<module>.launch_router` parses argv with `RouterArgs.add_cli_args`;
`--api-key` exists only as a command-line option (no env var, no config file), so the rendered launcher reads the
key from a 0600 file and passes it to `parse_router_args` in-process, never in the unit's argv. For smg the unit
also carries the health settings of release.py (SMG_HEALTH_FLAGS) unless router.flags sets them.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.models import RouterSpec
from orchestrator.render.files import RenderedFile, render_template, sha256_text, systemd_exec_arg
from orchestrator.resources import router_schemas_dir
from orchestrator.router.release import RouterRelease, release_of

UNIT_PATH = "/etc/systemd/system/sglang-router.service"
CONF_DIR = "/etc/sglang-router"
LAUNCHER_PATH = f"{CONF_DIR}/launch.py"
KEY_PATH = f"{CONF_DIR}/api-key"
#: Router options set from the router section's fields (dest → field), refused in `flags`.
ROUTER_RESERVED = {"worker_urls": "router.workers", "host": "router.host", "port": "router.port",
                   "policy": "router.policy", "api_key": "router.api_key"}


def router_schema(release: RouterRelease) -> FlagSchema:
    """The packaged parser dump of a router release (made by orchestrator/probes/flags_probe.py)."""
    schemas = router_schemas_dir()
    path = schemas / release.schema_file
    if not path.is_file():
        prefix = f"{release.package}-"
        known = ", ".join(sorted(p.stem.removeprefix(prefix) for p in schemas.glob(f"{prefix}[0-9]*.json")))
        raise ConfigError(f"no packaged flag schema for {release.name} (known: {known or 'none'})",
                          fix="pin router.version to a known release, or validate against the installed router")
    return FlagSchema.from_dump(path.read_text(), version=f"router {release.version}")


#: How long after its grace period a router still gets to exit before systemd kills it (closing its sockets and
#: its log): the unit's TimeoutStopSec is the grace period plus this.
STOP_MARGIN_S = 15


def stop_timeout_s(argv: Sequence[str], schema: FlagSchema) -> int:
    """Pure: the unit's TimeoutStopSec for a router's canonical argv. On SIGTERM both packages stop accepting and
    wait up to `--shutdown-grace-period-secs` (180 s by default in sglang-router 0.3.2 and smg 1.13.0: their
    parsers' own default) for the requests in flight, streams included; a TimeoutStopSec below that SIGKILLs the
    router and cuts every stream still open (issue 50, 11)."""
    option = "--shutdown-grace-period-secs"
    grace: object = argv[argv.index(option) + 1] if option in argv[:-1] else None
    if grace is None:
        action = schema.by_dest("shutdown_grace_period_secs")
        grace = action.default if action is not None else None
    return (int(grace) if isinstance(grace, int | str) and str(grace).isdigit() else 180) + STOP_MARGIN_S


@dataclass(frozen=True)
class RouterBundle:
    """Everything installed for the router: unit, launcher, key file (0600, absent without a key), and argv."""

    unit: RenderedFile
    launcher: RenderedFile
    key_file: RenderedFile | None
    argv: tuple[str, ...]

    @property
    def files(self) -> list[RenderedFile]:
        return [f for f in (self.unit, self.launcher, self.key_file) if f is not None]


def router_argv(spec: RouterSpec, schema: FlagSchema, urls: Sequence[str]) -> list[str]:
    """The router's argv (no key): owned fields first, then the flags canonicalised by the router's parser (the
    release's defaults first, each unless router.flags names it)."""
    flags = {**{k: v for k, v in release_of(spec).default_flags().items() if k not in spec.flags}, **spec.flags}
    flagset = canonicalize(flags, schema, reserved=ROUTER_RESERVED)
    argv = ["--host", spec.host, "--port", str(spec.port), "--policy", spec.policy]
    if urls:
        argv += ["--worker-urls", *urls]
    return argv + flagset.argv()


def render_router(spec: RouterSpec, schema: FlagSchema, urls: Sequence[str], api_key: str | None, *,
                  unit_path: str = UNIT_PATH, launcher_path: str = LAUNCHER_PATH) -> RouterBundle:
    """Pure: the files for a router whose workers are `urls` (the caller passes the healthy servers only); a
    migration's staging router (router/staging.py) has a unit and launcher path of its own."""
    argv = router_argv(spec, schema, urls)
    python = f"{spec.venv.rstrip('/')}/bin/python"
    exec_start = " ".join(systemd_exec_arg(a) for a in (python, launcher_path, *argv))
    release = release_of(spec)
    unit = render_template("sglang-router.service.j2", router_name=release.name, policy=spec.policy,
                           worker_count=len(urls), key_file=KEY_PATH if api_key else "", exec_start=exec_start,
                           timeout_stop_s=stop_timeout_s(argv, schema))
    launcher = render_template("sglang-router-launch.py.j2", router_name=release.name, module=release.module,
                               key_file=KEY_PATH if api_key else "")
    key = (RenderedFile(name="api-key", remote_path=KEY_PATH, mode=0o600, content=api_key + "\n",
                        sha256=sha256_text(api_key + "\n"), secrets=(api_key,)) if api_key else None)
    return RouterBundle(
        unit=RenderedFile(name=unit_path.rsplit("/", 1)[-1], remote_path=unit_path, mode=0o644, content=unit,
                          sha256=sha256_text(unit)),
        launcher=RenderedFile(name=launcher_path.rsplit("/", 1)[-1], remote_path=launcher_path, mode=0o644,
                              content=launcher,
                              sha256=sha256_text(launcher)),
        key_file=key, argv=tuple(argv))


def probe_command(python: str, argv: Sequence[str], release: RouterRelease) -> str:
    """Shell command that runs the router flag probe (probes/flags_probe.py on stdin) with the router venv's python."""
    kind = "smg" if release.package == "smg" else "router"
    return f"{shlex.quote(python)} - {kind} {shlex.quote(json.dumps(list(argv)))}"


def schema_from_probe(output: str, *, where: str, release: RouterRelease) -> FlagSchema:
    """The installed router's parser, from the probe's JSON; refuses a missing router or another version."""
    pinned, package = release.version, release.package
    try:
        doc = json.loads(output)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"router flag probe on {where} printed no JSON: {output[-300:]!r}",
                          fix="check the router venv's python") from exc
    if doc.get("version") is None:
        raise ConfigError(f"{package} is not installed in the router venv on {where}: {doc.get('error')}",
                          fix=f"install {package}=={pinned} there (deploy up does this once it manages the router)")
    if doc["version"] != pinned:
        raise ConfigError(f"router venv on {where} has {package} {doc['version']}, the inventory pins {pinned}",
                          fix=f"set router.version: \"{doc['version']}\" or reinstall {pinned}")
    return FlagSchema.from_dump(doc["actions"], version=f"router {doc['version']}")
