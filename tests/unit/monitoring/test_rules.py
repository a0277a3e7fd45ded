"""The shipped alert rules: promtool checks them, and one `promtool test rules` case per alert shows it fires
on the series deploy publishes (rendered by the real renderer) and stays quiet otherwise."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from orchestrator.monitoring.render import NAMES, render
from orchestrator.monitoring.sd import Discovery, Target, sd_files
from orchestrator.monitoring.state import (
    GpuFault,
    Hardware,
    MetricsState,
    Observation,
    ReleaseRecord,
    Watchdog,
    advance,
)
from orchestrator.resources import monitoring_dir
from tests.unit.monitoring.conftest import REASONS, A, B, C, figures, gates, history, metric_names, smg_names
from tests.unit.monitoring.test_dashboard import standin_sglang_names

RULES = monitoring_dir() / "rules.yaml"


def alerts() -> dict[str, dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def run_tests(promtool: str, tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "rules_test.yaml"
    path.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}))
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)


def test_promtool_checks_the_rules(promtool: str) -> None:
    res = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and "SUCCESS: 10 rules found" in res.stdout, res.stdout + res.stderr


def test_each_alert_says_what_and_which_deploy_command_diagnoses_it() -> None:
    for name, rule in alerts().items():
        notes = rule["annotations"]
        assert notes["summary"] and len(notes["description"]) > 60, name
        assert re.search(r"\bdeploy (status|history|bench|rollback|compare|doctor)\b", notes["diagnose"]), name
        names = metric_names(rule["expr"])
        ours, router = {n for n in names if n.startswith("deploy_")}, {n for n in names if n.startswith("smg_")}
        server = {n for n in names if n.startswith("sglang:")}
        assert ours or router or server or re.search(r"\bup\{job=~\"deploy-\.\+-(sglang|router)\"", rule["expr"]), name
        assert ours <= NAMES, (name, ours - NAMES)  # published by deploy
        assert router <= smg_names(), (name, router - smg_names())  # exported by the real router
        assert server <= standin_sglang_names(), (name, server - standin_sglang_names())  # the server's own


def expect(alert: str, labels: dict[str, str], value: str = "") -> dict[str, Any]:
    """The alert as promtool must see it: its labels, and its annotations with the labels filled in (a template
    that names a label the series lacks would leave an empty gap, and this comparison catches it)."""
    rule = alerts()[alert]

    def fill(text: str) -> str:
        text = re.sub(r"\{\{ \$value \| humanize \}\}", value, text)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)

    return {"exp_labels": {**labels, **rule["labels"]},  # the rule's severity wins over a series' own
            "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()}}


def published(metric: str, **labels: str) -> str:
    """One series exactly as the renderer writes it for the test history (so a renamed label breaks this test)."""
    for line in render("gpu-1", history()).splitlines():
        if line.startswith(metric + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return line.rsplit(" ", 1)[0]
    raise AssertionError(f"{metric} {labels} is not published")


def test_every_alert_fires_on_its_case_and_only_then(promtool: str, tmp_path: Path) -> None:
    exhausted = published("deploy_watchdog_exhausted")
    rolled = published("deploy_last_rollback_timestamp_seconds")
    bench = published("deploy_bench_output_throughput_tokens_per_second")
    ref = published("deploy_reference_output_throughput_tokens_per_second")
    per_w = published("deploy_bench_output_tokens_per_second_per_watt")
    failing = published("deploy_gpus", state="fail")
    ref_w = published("deploy_reference_output_tokens_per_second_per_watt")
    link = published_link_fault()
    assert set(alerts()) == {"DeployWatchdogExhausted", "DeployReleaseRolledBack", "DeployThroughputBelowReference",
                             "DeployTokensPerWattBelowReference", "DeployGpuFault", "DeployGpuLinkDegraded",
                             "DeployHostOutOfRouter", "DeployRouterDown", "DeployServerDown", "DeployServerStalled"}
    ref_labels = {"host": "gpu-1", "release": B, "preset": "gate", "reference_release": A}
    tests = [
        {"interval": "1m", "input_series": [{"series": exhausted, "values": "0 0 1 1"}],
         "alert_rule_test": [
             {"eval_time": "1m", "alertname": "DeployWatchdogExhausted", "exp_alerts": []},
             {"eval_time": "3m", "alertname": "DeployWatchdogExhausted",
              "exp_alerts": [expect("DeployWatchdogExhausted", {"host": "gpu-1", "release": B})]}]},
        # A rollback at t=300 s: the gauge appears then, the alert holds for an hour.
        {"interval": "1m", "input_series": [{"series": rolled, "values": "_ _ _ _ _ 300x80"}],
         "alert_rule_test": [
             {"eval_time": "4m", "alertname": "DeployReleaseRolledBack", "exp_alerts": []},
             {"eval_time": "6m", "alertname": "DeployReleaseRolledBack",
              "exp_alerts": [expect("DeployReleaseRolledBack", {"host": "gpu-1", "release": B, "candidate": C,
                                                                "reason": "gate"})]},
             {"eval_time": "70m", "alertname": "DeployReleaseRolledBack", "exp_alerts": []}]},
        # 990 against 1000 tok/s is within 10 %: quiet; 850 is not.
        {"interval": "1m", "input_series": [{"series": bench, "values": "990 990 850 850"},
                                            {"series": ref, "values": "1000x3"}],
         "alert_rule_test": [
             {"eval_time": "1m", "alertname": "DeployThroughputBelowReference", "exp_alerts": []},
             {"eval_time": "3m", "alertname": "DeployThroughputBelowReference",
              "exp_alerts": [expect("DeployThroughputBelowReference", ref_labels, "850")]}]},
        # The history's own figures: 1.5 tok/s per W against the reference's 2.0.
        {"interval": "1m",
         "input_series": [{"series": per_w, "values": "1.95 1.5"}, {"series": ref_w, "values": "2x1"}],
         "alert_rule_test": [
             {"eval_time": "0m", "alertname": "DeployTokensPerWattBelowReference", "exp_alerts": []},
             {"eval_time": "1m", "alertname": "DeployTokensPerWattBelowReference",
              "exp_alerts": [expect("DeployTokensPerWattBelowReference", ref_labels, "1.5")]}]},
        # up read the sensors: no fatal fault, then GPU 2 off the bus (the history's own reading).
        {"interval": "1m", "input_series": [{"series": failing, "values": "0 0 1 1"}],
         "alert_rule_test": [
             {"eval_time": "1m", "alertname": "DeployGpuFault", "exp_alerts": []},
             {"eval_time": "3m", "alertname": "DeployGpuFault",
              "exp_alerts": [expect("DeployGpuFault", {"host": "gpu-1", "release": B, "state": "fail"}, "1")]}]},
        # A later up read GPU 5's link at Gen2 under load.
        {"interval": "1m", "input_series": [{"series": link, "values": "_ _ 1 1"}],
         "alert_rule_test": [
             {"eval_time": "1m", "alertname": "DeployGpuLinkDegraded", "exp_alerts": []},
             {"eval_time": "3m", "alertname": "DeployGpuLinkDegraded",
              "exp_alerts": [expect("DeployGpuLinkDegraded", {"host": "gpu-1", "release": A, "gpu": "5",
                                                              "bus_id": "00000000:85:00.0", "kind": "link",
                                                              "action": "reboot_host"}, "1")]}]},
        *router_cases(),
        *server_cases(),
    ]
    res = run_tests(promtool, tmp_path, tests)
    assert res.returncode == 0, res.stdout + res.stderr


def test_no_alert_fires_on_a_healthy_saturated_server(promtool: str, tmp_path: Path) -> None:
    """Each alert has a case for the saturated server: requests in flight, nothing finishing, tokens moving."""
    res = run_tests(promtool, tmp_path, [saturated_server_case(sorted(alerts()))])
    assert res.returncode == 0, res.stdout + res.stderr


def published_link_fault() -> str:
    """deploy_gpu_fault of a link fault, as the renderer writes it after an up that read one."""
    hw = Hardware(at=100.0, gpus=8, states={"ok": 7, "fail": 1},
                  faults=(GpuFault("5", "00000000:85:00.0", "link", "reboot_host", "fail"),))
    s = advance(MetricsState(), Observation(at=100, command="up", release=A, judged={A: gates(100)},
                                            record=ReleaseRecord("kept", "0.5.12.post1", figures(1000, 2.0)),
                                            watchdog=Watchdog("ok", 0, 3, 99.0), hardware=hw), REASONS)
    line = next(ln for ln in render("gpu-1", s).splitlines() if ln.startswith("deploy_gpu_fault{"))
    return line.rsplit(" ", 1)[0]


def router_cases() -> list[dict[str, Any]]:
    """The router alerts on the labels the scrape jobs of `deploy metrics sd` give (its discovery files, rendered
    here) and smg's own series: gpu-2 serves but leaves the router's healthy list; then the router stops."""
    url1, url2 = "http://10.0.0.11:8000", "http://10.0.0.12:8000"
    d = Discovery("prod", servers=(Target("gpu-1", "10.0.0.11:8000", worker=url1),
                                   Target("gpu-2", "10.0.0.12:8000", worker=url2)),
                  routers=(Target("gpu-1", "10.0.0.11:29000"),), nodes=())

    def series(job: str, name: str, entry: dict[str, Any], **extra: str) -> str:
        labels = {**entry["labels"], "job": f"deploy-prod-{job}", "instance": entry["targets"][0], **extra}
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    files = {k: json.loads(v) for k, v in sd_files(d).items()}
    srv, (rtr,) = files["deploy-prod-sglang.json"], files["deploy-prod-router.json"]
    health = [series("router", "smg_worker_health", rtr, worker=w) for w in (url1, url2)]
    out_labels = {"deploy_group": "prod", "host": "gpu-2", "worker": url2}
    down_labels = {"deploy_group": "prod", "host": "gpu-1", "instance": "10.0.0.11:29000", "job": "deploy-prod-router"}
    return [
        {"interval": "1m",
         "input_series": [{"series": series("sglang", "up", srv[0]), "values": "1x8"},
                          {"series": series("sglang", "up", srv[1]), "values": "1x8"},
                          {"series": health[0], "values": "1x8"},
                          {"series": health[1], "values": "1 1 0 0 0"},  # then gone: smg removed it
                          {"series": series("router", "up", rtr), "values": "1x5 0 0 0"}],
         "alert_rule_test": [
             {"eval_time": "1m", "alertname": "DeployHostOutOfRouter", "exp_alerts": []},
             {"eval_time": "2m", "alertname": "DeployHostOutOfRouter", "exp_alerts": []},  # pending (for: 1m)
             {"eval_time": "3m", "alertname": "DeployHostOutOfRouter",
              "exp_alerts": [expect("DeployHostOutOfRouter", out_labels)]},
             {"eval_time": "5m", "alertname": "DeployRouterDown", "exp_alerts": []},
             {"eval_time": "7m", "alertname": "DeployRouterDown",
              "exp_alerts": [expect("DeployRouterDown", down_labels)]}]},
    ]


def server_cases() -> list[dict[str, Any]]:
    """The server alerts on the sglang job's labels (its discovery file, rendered here) and the server's own series,
    with no deploy run in between: gpu-1's server stops answering its scrape (a watchdog that gave up leaves it
    down), gpu-2's answers with requests queued while its generation counter stands still."""
    d = Discovery("prod", servers=(Target("gpu-1", "10.0.0.11:8000"), Target("gpu-2", "10.0.0.12:8000")),
                  routers=(), nodes=())
    srv = json.loads(sd_files(d)["deploy-prod-sglang.json"])

    def series(name: str, entry: dict[str, Any], **extra: str) -> str:
        labels = {**entry["labels"], "job": "deploy-prod-sglang", "instance": entry["targets"][0], **extra}
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    rank = {"tp_rank": "0", "pp_rank": "0", "engine_type": "unified", "model_name": "glm-5"}
    down = {"deploy_group": "prod", "host": "gpu-1", "instance": "10.0.0.11:8000", "job": "deploy-prod-sglang"}
    stalled = {"deploy_group": "prod", "host": "gpu-2"}
    return [
        {"interval": "1m",
         "input_series": [{"series": series("up", srv[0]), "values": "1 1 0x15"},
                          {"series": series("up", srv[1]), "values": "1x16"}],
         "alert_rule_test": [
             {"eval_time": "5m", "alertname": "DeployServerDown", "exp_alerts": []},  # a start takes minutes
             {"eval_time": "13m", "alertname": "DeployServerDown", "exp_alerts": [expect("DeployServerDown", down)]}]},
        # Tokens flow for 5 minutes with a queue (busy, not stalled), then the counter stands still.
        {"interval": "1m",
         "input_series": [{"series": series("sglang:num_queue_reqs", srv[1], **rank), "values": "40x30"},
                          {"series": series("sglang:num_running_reqs", srv[1], **rank), "values": "8x30"},
                          {"series": series("sglang:realtime_tokens_total", srv[1], **rank, mode="decode"),
                           "values": "0+5000x5 25000x25"}],
         "alert_rule_test": [
             {"eval_time": "5m", "alertname": "DeployServerStalled", "exp_alerts": []},
             {"eval_time": "12m", "alertname": "DeployServerStalled", "exp_alerts": []},  # still pending (for: 5m)
             {"eval_time": "16m", "alertname": "DeployServerStalled",
              "exp_alerts": [expect("DeployServerStalled", stalled, "48")]}]},
        # Stuck before its first token: requests queued, no realtime series at all.
        {"interval": "1m",
         "input_series": [{"series": series("sglang:num_queue_reqs", srv[1], **rank), "values": "5x20"},
                          {"series": series("sglang:num_running_reqs", srv[1], **rank), "values": "0x20"}],
         "alert_rule_test": [
             {"eval_time": "12m", "alertname": "DeployServerStalled",
              "exp_alerts": [expect("DeployServerStalled", stalled, "5")]}]},
    ]


def saturated_server_case(names: list[str]) -> dict[str, Any]:
    """A healthy saturated server (issue 50, item 10): 2048 long streams run and 512 wait, the GPUs flat out, and
    for 15 minutes not one request finishes, so sglang:generation_tokens_total (counted when a request finishes)
    stands still while sglang:realtime_tokens_total (every log interval) climbs. Every alert stays quiet."""
    d = Discovery("prod", servers=(Target("gpu-2", "10.0.0.12:8000"),), routers=(), nodes=())
    (srv,) = json.loads(sd_files(d)["deploy-prod-sglang.json"])
    base = {**srv["labels"], "job": "deploy-prod-sglang", "instance": srv["targets"][0],
            "tp_rank": "0", "pp_rank": "0", "engine_type": "unified", "model_name": "glm-5"}

    def series(name: str, **extra: str) -> str:
        labels = {**base, **extra}
        return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    return {"interval": "1m",
            "input_series": [
                {"series": series("up"), "values": "1x30"},
                {"series": series("sglang:num_running_reqs"), "values": "2048x30"},
                {"series": series("sglang:num_queue_reqs"), "values": "512x30"},
                {"series": series("sglang:generation_tokens_total"), "values": "3000000x30"},
                {"series": series("sglang:realtime_tokens_total", mode="decode"), "values": "0+600000x30"},
                {"series": series("sglang:realtime_tokens_total", mode="prefill_compute"), "values": "0+2000x30"}],
            "alert_rule_test": [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": []}
                                for name in names for t in (10, 16, 25)]}


def test_a_case_that_should_not_pass_fails(promtool: str, tmp_path: Path) -> None:
    """The harness itself can fail: an alert expected where its series says all is well."""
    ok = published("deploy_watchdog_exhausted")
    case = {"eval_time": "1m", "alertname": "DeployWatchdogExhausted",
            "exp_alerts": [{"exp_labels": {"host": "gpu-1"}}]}
    res = run_tests(promtool, tmp_path, [{"interval": "1m", "input_series": [{"series": ok, "values": "0 0"}],
                                          "alert_rule_test": [case]}])
    assert res.returncode != 0
