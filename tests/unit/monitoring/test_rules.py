"""The shipped alert rules: promtool checks them, and one `promtool test rules` case per alert shows it fires
on the series deploy publishes (rendered by the real renderer) and stays quiet otherwise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from orchestrator.monitoring.render import NAMES, render
from orchestrator.resources import monitoring_dir
from tests.unit.monitoring.conftest import A, B, C, history

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
    assert res.returncode == 0 and "SUCCESS: 5 rules found" in res.stdout, res.stdout + res.stderr


def test_each_alert_says_what_and_which_deploy_command_diagnoses_it() -> None:
    for name, rule in alerts().items():
        notes = rule["annotations"]
        assert notes["summary"] and len(notes["description"]) > 60, name
        assert re.search(r"\bdeploy (status|history|bench|rollback|compare|doctor)\b", notes["diagnose"]), name
        used = set(re.findall(r"\bdeploy_[a-z0-9_]+", rule["expr"]))
        assert used and used <= NAMES, (name, used - NAMES)


def expect(alert: str, labels: dict[str, str], value: str = "") -> dict[str, Any]:
    """The alert as promtool must see it: its labels, and its annotations with the labels filled in (a template
    that names a label the series lacks would leave an empty gap, and this comparison catches it)."""
    rule = alerts()[alert]

    def fill(text: str) -> str:
        text = re.sub(r"\{\{ \$value \| humanize \}\}", value, text)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m[1]], text)

    return {"exp_labels": {**rule["labels"], **labels},
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
    assert set(alerts()) == {"DeployWatchdogExhausted", "DeployReleaseRolledBack", "DeployThroughputBelowReference",
                             "DeployTokensPerWattBelowReference", "DeployGpuFault"}
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
    ]
    res = run_tests(promtool, tmp_path, tests)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_case_that_should_not_pass_fails(promtool: str, tmp_path: Path) -> None:
    """The harness itself can fail: an alert expected where its series says all is well."""
    ok = published("deploy_watchdog_exhausted")
    case = {"eval_time": "1m", "alertname": "DeployWatchdogExhausted",
            "exp_alerts": [{"exp_labels": {"host": "gpu-1"}}]}
    res = run_tests(promtool, tmp_path, [{"interval": "1m", "input_series": [{"series": ok, "values": "0 0"}],
                                          "alert_rule_test": [case]}])
    assert res.returncode != 0
