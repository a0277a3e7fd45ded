"""`deploy metrics sd group G [--out DIR]`: Prometheus file-based service discovery for a group (issue 40).

Writes the discovery files, the bearer-token file (0600, only when the group's profile has an API key) and
`deploy-G-scrape.yml`, the scrape_configs to paste into prometheus.yml (docs/monitoring.md). Learning the
containers' addresses costs one round trip per host whose net0 has no static ip=; nothing is changed on a host.
"""

from __future__ import annotations

from pathlib import Path

import click

from orchestrator.cli.common import AppContext, SuggestingGroup, common_options, tofu_option
from orchestrator.errors import ConfigError
from orchestrator.local.files import write_file
from orchestrator.monitoring.sd import (
    NODE_EXPORTER_PORT,
    Discovery,
    Target,
    scrape_configs,
    sd_files,
    token_name,
)
from orchestrator.router.addresses import learn
from orchestrator.router.places import router_place, router_workers, worker_url
from orchestrator.router.release import exported_metrics_port


@click.group("metrics", cls=SuggestingGroup)
def metrics() -> None:
    """Prometheus integration: file-based service discovery for a group (docs/monitoring.md)."""


@metrics.command("sd")
@click.argument("word", type=click.Choice(["group"]))
@click.argument("group")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("prometheus"),
              show_default=True, help="directory for the discovery files, the token file and the scrape config")
@tofu_option
@common_options
def sd(app: AppContext, word: str, group: str, out_dir: Path, tofu: bool) -> int:
    """Write file_sd JSON for GROUP's servers, its router and its hosts' node_exporters."""
    inv = app.inventory
    hosts = inv.group_hosts(group)
    if not hosts:
        raise ConfigError(f"group {group} has no hosts", fix="list the groups in the inventory's groups: section")
    place = router_place(inv)
    wanted = [(h, h.container.vmid) for h in hosts] + ([(place.host, place.vmid)] if place is not None else [])
    addresses = learn(wanted, tofu=tofu)
    routers: list[Target] = []
    if place is not None and inv.router is not None and (at := addresses.get(place.host, place.vmid)) is not None:
        routers.append(Target(place.host.name, f"{at}:{exported_metrics_port(inv.router.flags)}"))
    # Only where the router's own metrics are scraped: the worker label is what DeployHostOutOfRouter joins on.
    workers = {h.name for h in router_workers(inv)} if routers else set()
    servers, missing = [], []
    for h in hosts:
        addr = addresses.get(h, h.container.vmid)
        if addr is None:
            missing.append(h.name)
            continue
        servers.append(Target(h.name, f"{addr}:{inv.profile_for(h).port}",
                              worker=worker_url(inv, h, addresses) if h.name in workers else None))
    nodes = [Target(h.name, f"{h.address}:{NODE_EXPORTER_PORT}") for h in hosts]
    out = out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    keys = {p.api_key.read() for p in (inv.profile_for(h) for h in hosts) if p.api_key is not None}
    if len(keys) > 1:
        raise ConfigError(f"the hosts of group {group} use {len(keys)} different API keys; one scrape job has one "
                          "bearer token", fix="give the group's profiles one api_key, or one group per key")
    written = []
    for name, text in sd_files(Discovery(group, tuple(servers), tuple(routers), tuple(nodes))).items():
        write_file(out / name, text)  # Prometheus re-reads a file_sd file when it changes: never half of it
        written.append(str(out / name))
    if keys:
        write_file(out / token_name(group), next(iter(keys)) + "\n", mode=0o600)
        written.append(str(out / token_name(group)))
    scrape = out / f"deploy-{group}-scrape.yml"
    write_file(scrape, scrape_configs(group, out, token=bool(keys)))
    written.append(str(scrape))
    app.out.emit({"ok": True, "group": group, "files": written, "servers": len(servers), "routers": len(routers),
                  "nodes": len(nodes), "unknown_addresses": missing})
    for path in written:
        app.out.line(f"wrote {path}")
    if missing:
        app.out.line(f"no site address for {', '.join(missing)} (container stopped?): left out of the sglang job")
    app.out.line(f"add the scrape_configs of {scrape} to prometheus.yml (docs/monitoring.md)")
    return 0
