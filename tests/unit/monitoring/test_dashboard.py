"""The shipped Grafana dashboard (orchestrator/monitoring/dashboard.json) against a real Prometheus (Debian's
prometheus 2.42 binary, on 127.0.0.1): the scrape configuration `deploy metrics sd` writes scrapes two hosts'
deploy.prom and two servers' /metrics (served here by a tiny HTTP server, in the exact text the renderer writes
and real sglang's series and labels), the shipped rules are loaded, and every panel's and annotation's query
returns series. Also: from a rollback published to the alert firing, in seconds."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from orchestrator.monitoring.render import METRICS, render
from orchestrator.monitoring.sd import Discovery, Target, scrape_configs, sd_files
from orchestrator.monitoring.state import MetricsState, Observation, ReleaseRecord, Rollback, Watchdog, advance
from orchestrator.resources import monitoring_dir

from .conftest import HARDWARE, REASONS, SMG_METRICS, A, B, C, figures, gates, metric_names, smg_names

REPO = Path(__file__).resolve().parents[3]
STANDIN_SERVER = REPO / "simulator" / "sglang_standin" / "sglang" / "_sim" / "server.py"
#: Real sglang's scheduler series carry these labels (field notes: tp_rank, pp_rank, engine_type, model_name).
SGLANG_LABELS = 'engine_type="unified",model_name="glm-5",pp_rank="0",tp_rank="0"'


def dashboard() -> dict[str, Any]:
    return json.loads((monitoring_dir() / "dashboard.json").read_text())


def queries(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and annotation."""
    found = [(f"panel {p['title']!r}", t["expr"]) for p in d["panels"] for t in p.get("targets", [])]
    found += [(f"annotation {a['name']!r}", a["expr"]) for a in d["annotations"]["list"]]
    return found


def standin_sglang_names() -> set[str]:
    """The sglang:* series the simulator's server publishes (its /metrics rows), read from its source."""
    text = STANDIN_SERVER.read_text()
    names = {f"sglang:{m}" for m in re.findall(r'\("([a-z_]+)", "(?:gauge|counter)"', text)}
    names |= set(re.findall(r"sglang:[a-z_]+_total", text))
    assert "sglang:num_running_reqs" in names, "the stand-in's metric rows moved: update this reader"
    return names


def test_every_query_names_only_metrics_that_exist() -> None:
    known = {m.name for m in METRICS} | standin_sglang_names() | smg_names()
    d = dashboard()
    assert d["uid"] == "deploy-fleet" and len([p for p in d["panels"] if p["type"] != "row"]) >= 12
    used: set[str] = set()
    for where, expr in queries(d):
        names = metric_names(expr)
        assert names, f"{where}: {expr} reads no metric"
        assert names <= known, f"{where}: {sorted(names - known)} is published by neither deploy, sglang nor smg"
        used |= names
    # the figures operators look at first are all on it
    assert {"deploy_release_info", "deploy_rollbacks_total", "deploy_watchdog_exhausted",
            "deploy_bench_output_tokens_per_second_per_watt", "sglang:realtime_tokens_total"} <= used
    # the token rate moves while streams run: not generation_tokens_total, counted only when a request finishes
    assert "sglang:generation_tokens_total" not in used


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Texts:
    """One tiny HTTP server per target: GET /metrics answers the target's current text."""

    def __init__(self) -> None:
        self.texts: dict[int, str] = {}
        self.servers: list[http.server.ThreadingHTTPServer] = []

    def serve(self, text: str) -> str:
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = outer.texts[self.server.server_address[1]].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.servers.append(server)
        port = int(server.server_address[1])
        self.texts[port] = text
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"127.0.0.1:{port}"

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()


def sglang_text(tokens: float) -> str:
    rows = [("num_running_reqs", "gauge", 3), ("num_queue_reqs", "gauge", 1), ("token_usage", "gauge", 0.42),
            ("generation_tokens_total", "counter", tokens), ("prompt_tokens_total", "counter", tokens / 2)]
    out = []
    for name, kind, value in rows:
        out += [f"# HELP sglang:{name} {name}", f"# TYPE sglang:{name} {kind}",
                f"sglang:{name}{{{SGLANG_LABELS}}} {float(value)}"]
    out += ["# HELP sglang:realtime_tokens_total realtime", "# TYPE sglang:realtime_tokens_total counter"]
    out += [f'sglang:realtime_tokens_total{{{SGLANG_LABELS},mode="{m}"}} {tokens * k}'
            for m, k in (("prefill_compute", 0.5), ("decode", 1.0))]
    return "\n".join(out) + "\n"


def state(now: float, rolled_back: bool) -> MetricsState:
    """up converged A and a roll kept B; with `rolled_back`, a roll to C has just failed its throughput gate."""
    s = advance(MetricsState(), Observation(at=now - 600, command="up", release=A, judged={A: gates(now - 600)},
                                            record=ReleaseRecord("kept", "0.5.12.post1", figures(1000, 2.0)),
                                            watchdog=Watchdog("ok", 0, 3, now - 601), hardware=HARDWARE), REASONS)
    s = advance(s, Observation(at=now - 300, command="roll", release=B, judged={B: gates(now - 300)},
                               record=ReleaseRecord("kept", "0.5.12.post1", figures(990, 1.5)),
                               watchdog=Watchdog("ok", 0, 3, now - 301)), REASONS)
    if rolled_back:
        s = advance(s, Observation(at=now, command="roll", release=B, judged={C: gates(now, failed="throughput")},
                                   rollbacks=(Rollback(at=now, reason="throughput", candidate=C, to=B),),
                                   watchdog=Watchdog("ok", 0, 3, now - 1)), REASONS)
    return s


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Texts, list[int]]]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: scripts/install.sh installs Debian's prometheus package"
    texts = Texts()
    now = time.time()
    nodes = [texts.serve(render(h, state(now, rolled_back=False))) for h in ("gpu-1", "gpu-2")]
    servers = [texts.serve(sglang_text(1000.0)) for _ in ("gpu-1", "gpu-2")]
    # The real smg's capture, its two workers renamed to the two servers: gpu-1 healthy, gpu-2 draining (health 0).
    smg = SMG_METRICS.read_text().replace("http://127.0.0.1:18002", f"http://{servers[0]}")
    routers = (Target("gpu-1", texts.serve(smg.replace("http://127.0.0.1:18001", f"http://{servers[1]}"))),)
    d = Discovery("prod", servers=tuple(Target(h, a, worker=f"http://{a}")
                                        for h, a in zip(("gpu-1", "gpu-2"), servers, strict=True)),
                  routers=routers, nodes=tuple(Target(h, a) for h, a in zip(("gpu-1", "gpu-2"), nodes, strict=True)))
    for name, text in sd_files(d).items():
        (tmp_path / name).write_text(text)
    rules = tmp_path / "rules.yaml"
    rules.write_text((monitoring_dir() / "rules.yaml").read_text())
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      f"rule_files:\n  - {rules}\n" + scrape_configs("prod", tmp_path, token=False))
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{base}/-/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            time.sleep(0.2)
        yield base, texts, [int(a.rsplit(":", 1)[1]) for a in nodes]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        texts.close()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    resp = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10)
    doc = resp.json()
    assert doc["status"] == "success", (expr, doc)
    return list(doc["data"]["result"])


def until(fn: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.25)
    return fn()


def test_a_real_prometheus_answers_every_dashboard_query_and_fires_on_a_rollback(prometheus) -> None:
    base, texts, node_ports = prometheus
    assert until(lambda: len(query(base, "up == 1")) == 5, 60), query(base, "up")
    sglang_ports = [p for p, t in texts.texts.items() if p not in node_ports and "sglang:" in t]
    for p in sglang_ports:  # the counters move, so rate() has two different samples
        texts.texts[p] = sglang_text(1000.0)
    time.sleep(2.5)
    for p in sglang_ports:
        texts.texts[p] = sglang_text(1600.0)
    time.sleep(2.5)
    empty = []
    for where, expr in queries(dashboard()):
        if not until(lambda e=expr: query(base, e.replace("$host", ".*")), 10):
            empty.append(f"{where}: {expr}")
    # the rollback annotation needs a rollback: checked after it below
    assert [e for e in empty if "annotation 'Rollbacks'" not in e] == []
    out = next(t["expr"] for p in dashboard()["panels"] if p["title"] == "Hosts out of the router"
               for t in p["targets"])
    assert [r["metric"]["host"] for r in query(base, out.replace("$host", ".*"))] == ["gpu-2"]  # the draining one
    assert query(base, 'ALERTS{alertname="DeployReleaseRolledBack"}') == []

    began = time.monotonic()
    texts.texts[node_ports[0]] = render("gpu-1", state(time.time(), rolled_back=True))  # the roll's last round trip
    firing = until(lambda: query(base, 'ALERTS{alertname="DeployReleaseRolledBack",alertstate="firing"}'), 30)
    took = time.monotonic() - began
    assert firing and firing[0]["metric"]["host"] == "gpu-1" and firing[0]["metric"]["candidate"] == C, firing
    print(f"rollback published -> DeployReleaseRolledBack firing: {took:.1f} s (scrape 1 s, rules 1 s)")
    rollbacks = next(a for a in dashboard()["annotations"]["list"] if a["name"] == "Rollbacks")
    assert query(base, rollbacks["expr"].replace("$host", ".*"))
