"""Issue 40: a real Prometheus (Debian's prometheus 2.42) and a real node_exporter (Debian's
prometheus-node-exporter, textfile collector only) watch a simulated host through the files `deploy metrics sd`
writes and the shipped rules: deploy's own series (read from the host's textfile directory, as on a PVE node) and
the server's `/metrics` at its container address. A roll that rolls back fires `DeployReleaseRolledBack`; the
test prints how long that took after the roll's exit."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from orchestrator.resources import monitoring_dir
from tests.e2e.conftest import DeployEnv, until
from tests.unit.monitoring.test_dashboard import dashboard, queries

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
#: Where `deploy metrics sd` points the node job (node_exporter's default); the test's node_exporter listens on a
#: free port of the host's address instead (a machine's own node_exporter may hold 9100 on every address).
NODE_EXPORTER_PORT = 9100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: scripts/install.sh installs it (Debian's package)"
    return path


def query(base: str, expr: str) -> list[dict[str, Any]]:
    doc = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert doc["status"] == "success", (expr, doc)
    return list(doc["data"]["result"])


@pytest.fixture
def watched(converged: DeployEnv, tmp_path: Path) -> Iterator[tuple[DeployEnv, str]]:
    """The host's node_exporter on the host's own address, a Prometheus on 127.0.0.1 with the sd files and rules."""
    env = converged
    (env.inventory / "monitored.yaml").write_text(f"groups:\n  monitored: [{env.host}]\n")
    out = tmp_path / "prometheus"
    sd = env.run("metrics", "sd", "group", "monitored", "--out", str(out))
    assert sd.rc == 0, sd.text
    textfile = env.sim.host_dir / "fs" / "var" / "lib" / "prometheus" / "node-exporter"
    node_sd = out / "deploy-monitored-node.json"
    assert f'"{env.sim.address}:{NODE_EXPORTER_PORT}"' in node_sd.read_text()
    node_port = _free_port()
    node_sd.write_text(node_sd.read_text().replace(f":{NODE_EXPORTER_PORT}", f":{node_port}"))
    procs: list[subprocess.Popen[bytes]] = []
    logs = [(tmp_path / "node-exporter.log").open("w"), (tmp_path / "prometheus.log").open("w")]
    procs.append(subprocess.Popen([_binary("prometheus-node-exporter"), "--collector.disable-defaults",
                                   "--collector.textfile", f"--collector.textfile.directory={textfile}",
                                   f"--web.listen-address={env.sim.address}:{node_port}"],
                                  stdout=logs[0], stderr=subprocess.STDOUT))
    rules = out / "rules.yaml"
    rules.write_text((monitoring_dir() / "rules.yaml").read_text())
    config = out / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      f"rule_files:\n  - {rules}\n" + (out / "deploy-monitored-scrape.yml").read_text())
    port = _free_port()
    procs.append(subprocess.Popen([_binary("prometheus"), f"--config.file={config}",
                                   f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=logs[1], stderr=subprocess.STDOUT))
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return len(query(base, "up == 1")) == 2  # the server and the node_exporter (no router here)
            except requests.RequestException:
                return False

        assert until(up, 90), (tmp_path / "prometheus.log").read_text()[-2000:] + \
            (tmp_path / "node-exporter.log").read_text()[-2000:]
        yield env, base
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        for f in logs:
            f.close()
        (env.inventory / "monitored.yaml").unlink()


def test_a_real_prometheus_watches_the_host_and_fires_on_its_rollback(watched: tuple[DeployEnv, str]) -> None:
    env, base = watched
    release = env.ct("readlink /var/lib/deploy/current").stdout.strip().removeprefix("releases/")
    (info,) = query(base, f'deploy_release_info{{host="{env.host}"}}')
    assert info["metric"]["release"] == release and info["metric"]["verdict"] == "kept", info
    assert query(base, f'sglang:num_running_reqs{{host="{env.host}",tp_rank="0"}}')  # the server's own series
    # the dashboard's queries over what this host has published (a bench-less up: no bench figures yet)
    def answered() -> list[str]:
        have = {r["metric"]["__name__"] for r in query(base, '{__name__=~"deploy_.*|sglang:.*"}')}
        return [expr for _where, expr in queries(dashboard())
                if any(name in expr for name in have) and query(base, expr.replace("$host", ".*"))]

    # a rate() answers once its window holds two scrapes: on a loaded machine the first scrapes come late
    assert until(lambda: len(answered()) >= 10, 60), answered()

    env.ct_faults(crash_on_start=True, match="--max-running-requests 1024")
    try:
        res = env.run("--json", "roll", "host", env.host, "--set", "max-running-requests=1024", "--skip-bench")
        ended = time.monotonic()
        assert res.rc not in (0, 2) and "rolled back" in res.json["what"], res.text
        candidate = res.json["details"]["candidate"]  # the session host may carry an earlier test's rollback alert
        firing = until(lambda: query(base, 'ALERTS{alertname="DeployReleaseRolledBack",alertstate="firing",'
                                           f'host="{env.host}",candidate="{candidate}"}}'), 60)
        took = time.monotonic() - ended
    finally:
        env.ct_faults(crash_on_start=False, match=None)
    assert firing and firing[0]["metric"]["release"] == release, firing
    print(f"roll exited (rolled back) -> DeployReleaseRolledBack firing: {took:.1f} s "
          "(scrape 1 s, rule evaluation 1 s, node_exporter textfile)")
    (rb,) = query(base, f'increase(deploy_rollbacks_total{{host="{env.host}",reason="health"}}[5m])')
    assert float(rb["value"][1]) > 0
