"""The router as a managed part: its unit and launcher (pure rendering), and its worker API (a narrow adapter).

Facts about the pinned sglang-router 0.3.2 that shape this module (checked on the installed wheel; see
docs/fleet.md "The router"):
- `python -m sglang_router.launch_router` parses argv with `RouterArgs.add_cli_args`; `--api-key` exists only as
  a command-line option (no env var, no config file), so the rendered launcher reads the key from a 0600 file and
  passes it to `parse_router_args` in-process, never in the unit's argv;
- workers are managed through `POST /workers` (JSON `{"url": ..., "api_key": ...}`, answered `202` with a
  `worker_id`; the worker joins after the router's own health check), `GET /workers` (`{"workers": [...]}`) and
  `DELETE /workers/{worker_id}`. The older `POST /add_worker?url=` / `/remove_worker` routes answer 404.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from orchestrator.errors import ConfigError, RemoteError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.models import Host, Inventory, RouterSpec
from orchestrator.render.files import RenderedFile, render_template, sha256_text, systemd_exec_arg

SCHEMAS = Path(__file__).resolve().parent / "schemas"
UNIT_PATH = "/etc/systemd/system/sglang-router.service"
CONF_DIR = "/etc/sglang-router"
LAUNCHER_PATH = f"{CONF_DIR}/launch.py"
KEY_PATH = f"{CONF_DIR}/api-key"
#: Router options set from the router section's fields (dest → field), refused in `flags`.
ROUTER_RESERVED = {"worker_urls": "router.workers", "host": "router.host", "port": "router.port",
                   "policy": "router.policy", "api_key": "router.api_key"}


def router_schema(version: str) -> FlagSchema:
    """The packaged parser dump of a router release (made by orchestrator/probes/flags_probe.py)."""
    path = SCHEMAS / f"sglang-router-{version}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem.removeprefix("sglang-router-") for p in SCHEMAS.glob("sglang-router-*.json")))
        raise ConfigError(f"no packaged flag schema for sglang-router {version} (known: {known or 'none'})",
                          fix="pin router.version to a known release, or validate against the installed router")
    return FlagSchema.from_dump(path.read_text(), version=f"router {version}")


def router_workers(inventory: Inventory) -> list[Host]:
    spec = inventory.router
    if spec is None:
        return []
    return inventory.group_hosts(spec.workers) if spec.workers else list(inventory.hosts.values())


def worker_url(inventory: Inventory, host: Host) -> str:
    """Where the router reaches a host's server: router.worker_urls, else http://ADDRESS:PROFILE_PORT."""
    spec = inventory.router
    if spec is not None and host.name in spec.worker_urls:
        return spec.worker_urls[host.name].rstrip("/")
    return f"http://{host.address}:{inventory.profile_for(host).port}"


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
    """The router's argv (no key): owned fields first, then the flags canonicalised by the router's parser."""
    flagset = canonicalize(spec.flags, schema, reserved=ROUTER_RESERVED)
    argv = ["--host", spec.host, "--port", str(spec.port), "--policy", spec.policy]
    if urls:
        argv += ["--worker-urls", *urls]
    return argv + flagset.argv()


def render_router(spec: RouterSpec, schema: FlagSchema, urls: Sequence[str], api_key: str | None) -> RouterBundle:
    """Pure: the files for a router whose workers are `urls` (the caller passes the healthy servers only)."""
    argv = router_argv(spec, schema, urls)
    python = f"{spec.venv.rstrip('/')}/bin/python"
    exec_start = " ".join(systemd_exec_arg(a) for a in (python, LAUNCHER_PATH, *argv))
    unit = render_template("sglang-router.service.j2", version=spec.version, policy=spec.policy,
                           worker_count=len(urls), key_file=KEY_PATH if api_key else "", exec_start=exec_start)
    launcher = render_template("sglang-router-launch.py.j2", version=spec.version,
                               key_file=KEY_PATH if api_key else "")
    key = (RenderedFile(name="api-key", remote_path=KEY_PATH, mode=0o600, content=api_key + "\n",
                        sha256=sha256_text(api_key + "\n"), secrets=(api_key,)) if api_key else None)
    return RouterBundle(
        unit=RenderedFile(name="sglang-router.service", remote_path=UNIT_PATH, mode=0o644, content=unit,
                          sha256=sha256_text(unit)),
        launcher=RenderedFile(name="launch.py", remote_path=LAUNCHER_PATH, mode=0o644, content=launcher,
                              sha256=sha256_text(launcher)),
        key_file=key, argv=tuple(argv))


PROBE_SCRIPT = Path(__file__).resolve().parent.parent / "probes" / "flags_probe.py"


def probe_command(python: str, argv: Sequence[str]) -> str:
    """Shell command that runs the router flag probe (PROBE_SCRIPT on stdin) with the router venv's python."""
    return f"{shlex.quote(python)} - router {shlex.quote(json.dumps(list(argv)))}"


def schema_from_probe(output: str, *, where: str, pinned: str) -> FlagSchema:
    """The installed router's parser, from the probe's JSON; refuses a missing router or another version."""
    try:
        doc = json.loads(output)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"router flag probe on {where} printed no JSON: {output[-300:]!r}",
                          fix="check the router venv's python") from exc
    if doc.get("version") is None:
        raise ConfigError(f"sglang-router is not installed in the router venv on {where}: {doc.get('error')}",
                          fix=f"install sglang-router=={pinned} there (deploy up does this once it manages the router)")
    if doc["version"] != pinned:
        raise ConfigError(f"router venv on {where} has sglang-router {doc['version']}, the inventory pins {pinned}",
                          fix=f"set router.version: \"{doc['version']}\" or reinstall {pinned}")
    return FlagSchema.from_dump(doc["actions"], version=f"router {doc['version']}")


# ------------------------------------------------------------------------------------------------ worker API
@dataclass(frozen=True)
class RouterWorker:
    id: str
    url: str
    healthy: bool | None
    load: int | None
    raw: dict[str, Any]


class RouterClient:
    """The router's worker API over HTTP(S). Only this class talks to the router."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 10.0,
                 session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = session or requests.Session()
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, expect: tuple[int, ...], **kwargs: Any) -> requests.Response:
        url = f"{self.base_url}{path}"
        try:
            resp = self.session.request(method, url, timeout=self.timeout_s, **kwargs)
        except requests.RequestException as exc:
            raise RemoteError(f"router {self.base_url}: {method} {path} failed: {exc}",
                              fix="check that the router runs (systemctl status sglang-router) and its address",
                              step="router") from exc
        if resp.status_code not in expect:
            raise RemoteError(f"router {self.base_url}: {method} {path} answered {resp.status_code}: "
                              f"{resp.text[:300]}", fix="see the router's journal (journalctl -u sglang-router)",
                              step="router")
        return resp

    def healthy(self) -> bool:
        """The router's own liveness (`/health`); it does not say whether any worker is healthy (`/readiness`)."""
        try:
            return self._call("GET", "/health", expect=(200, 503)).status_code == 200
        except RemoteError:
            return False

    def ready(self) -> bool:
        """At least one healthy worker (`/readiness` 200, else 503 'insufficient healthy workers')."""
        return self._call("GET", "/readiness", expect=(200, 503)).status_code == 200

    def list_workers(self) -> list[RouterWorker]:
        data = self._call("GET", "/workers", expect=(200,)).json()
        out = []
        for w in data.get("workers") or []:
            out.append(RouterWorker(id=str(w.get("id", "")), url=str(w.get("url", "")).rstrip("/"),
                                    healthy=w.get("is_healthy"), load=w.get("load"), raw=w))
        return out

    def find(self, url: str) -> RouterWorker | None:
        url = url.rstrip("/")
        return next((w for w in self.list_workers() if w.url == url), None)

    def add_worker(self, url: str, api_key: str | None = None) -> str:
        """Queue a worker (202); the router adds it after its own health check. Returns the job/worker id."""
        body: dict[str, Any] = {"url": url}
        if api_key:
            body["api_key"] = api_key
        resp = self._call("POST", "/workers", expect=(200, 201, 202), json=body)
        return str(resp.json().get("worker_id", ""))

    def remove_worker(self, url: str) -> bool:
        """Remove a worker by URL (the API removes by id); False when the router does not list it."""
        worker = self.find(url)
        if worker is None:
            return False
        self._call("DELETE", f"/workers/{worker.id}", expect=(200, 202, 204))
        return True


# ------------------------------------------------------------------------------------------------ fleet view
def router_base_url(inventory: Inventory) -> str:
    """Where the operator reaches the router's API: router.url, else its bind address on this machine, else its
    host's address (a router in a container: the simulator relays HOST:PORT into the container; on a real node
    the container has its own address, which router.url names)."""
    spec = inventory.router
    assert spec is not None
    if spec.url is not None:
        return spec.url
    if spec.runs_on == "operator":
        host = "127.0.0.1" if spec.host in ("0.0.0.0", "::") else spec.host
    else:
        host = inventory.hosts[spec.runs_on].address
    return f"http://{host}:{spec.port}"


def router_api_key(inventory: Inventory) -> str | None:
    """router.api_key, else the workers' profile api_key (one key for the fleet); None without either."""
    spec = inventory.router
    if spec is None:
        return None
    if spec.api_key is not None:
        return spec.api_key.read()
    workers = router_workers(inventory)
    profile_key = inventory.profile_for(workers[0]).api_key if workers else None
    return profile_key.read() if profile_key is not None else None


def managed_unit_state(inventory: Inventory, *, tofu: bool = False) -> dict[str, Any]:
    """`systemctl is-active sglang-router` in the router's container (one round trip), when deploy manages it."""
    spec = inventory.router
    if spec is None or spec.runs_on == "operator":
        return {}
    from orchestrator.remote.container import Container
    from orchestrator.remote.ssh import SshHost

    host = inventory.hosts[spec.runs_on]
    vmid = spec.vmid if spec.vmid is not None else host.container.vmid
    where = {"runs_on": host.name, "vmid": vmid}
    try:
        with SshHost(host, tofu=tofu) as ssh:
            res = Container(ssh, vmid).run("systemctl is-active sglang-router || true", timeout=60,
                                           what="router unit state")
        return {**where, "unit": res.stdout.strip() or "unknown"}
    except RemoteError as err:
        return {**where, "unit": "unknown", "unit_error": err.what}
