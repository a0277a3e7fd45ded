"""Prometheus file-based service discovery for a group, pure: targets in, file texts out.

Three jobs per group, each a `file_sd_configs` file: the sglang servers' `/metrics` (each container's address on
the site network and its profile's port; the server must run with --enable-metrics), the router's metrics
(sglang-router's Prometheus port), and each PVE host's node_exporter (where deploy.prom is read). A server that
the group's router should list carries a `worker` label, the URL the router knows it by. The API key
goes into a bearer-token file (0600) that the scrape config names by path (`authorization.credentials_file`):
never into the discovery files or the config itself, which are world-readable by design.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

#: node_exporter's default listen port (Debian's prometheus-node-exporter).
NODE_EXPORTER_PORT = 9100


@dataclass(frozen=True)
class Target:
    host: str  # the inventory name: the `host` label deploy's own metrics carry too
    address: str  # host:port
    #: A server the group's router should list: the URL the router names it by (smg's `worker` label), so an alert
    #: can join the server's `up` with the router's `smg_worker_health` (DeployHostOutOfRouter).
    worker: str | None = None


@dataclass(frozen=True)
class Discovery:
    group: str
    servers: tuple[Target, ...]
    routers: tuple[Target, ...]
    nodes: tuple[Target, ...]


def _labels(group: str, t: Target) -> dict[str, str]:
    return {"host": t.host, "deploy_group": group, **({"worker": t.worker} if t.worker else {})}


def _sd(group: str, targets: tuple[Target, ...]) -> str:
    return json.dumps([{"targets": [t.address], "labels": _labels(group, t)} for t in targets], indent=2) + "\n"


def file_names(group: str) -> dict[str, str]:
    """job → discovery file name."""
    return {job: f"deploy-{group}-{job}.json" for job in ("sglang", "router", "node")}


def token_name(group: str) -> str:
    return f"deploy-{group}.token"


def sd_files(d: Discovery) -> dict[str, str]:
    """file name → text, one discovery file per job (an empty list where the group has no such target)."""
    names = file_names(d.group)
    return {names["sglang"]: _sd(d.group, d.servers), names["router"]: _sd(d.group, d.routers),
            names["node"]: _sd(d.group, d.nodes)}


def scrape_configs(group: str, directory: Path, *, token: bool) -> str:
    """The `scrape_configs` entries that use the discovery files (absolute paths) and the token file."""
    names = file_names(group)
    bearer = {"type": "Bearer", "credentials_file": str(directory / token_name(group))}
    auth = {"authorization": bearer} if token else {}
    jobs = [
        {"job_name": f"deploy-{group}-sglang", "metrics_path": "/metrics", **auth,
         "file_sd_configs": [{"files": [str(directory / names["sglang"])]}]},
        {"job_name": f"deploy-{group}-router", "metrics_path": "/metrics",
         "file_sd_configs": [{"files": [str(directory / names["router"])]}]},
        {"job_name": f"deploy-{group}-node", "metrics_path": "/metrics",
         "file_sd_configs": [{"files": [str(directory / names["node"])]}]},
    ]
    return yaml.safe_dump({"scrape_configs": jobs}, sort_keys=False)
