"""`deploy up` from a bare simulated Proxmox host to a checked server, and again with nothing to do."""

from __future__ import annotations

import re
import subprocess

import pytest

from orchestrator.monitoring.publish import PROM_PATH
from tests.e2e.conftest import SHARED, DeployEnv


def steps(payload: dict) -> dict[str, dict]:
    return {s["name"]: s for s in payload["steps"]}


def test_up_from_nothing_then_no_changes(deploy_env: DeployEnv) -> None:
    first = deploy_env.run("--json", "up", "host", deploy_env.sim.address)  # named by address
    assert first.rc == 0, first.text
    p = first.json
    s = steps(p)
    assert p["ok"] and p["changed"]
    assert s["container"]["status"] == "changed"
    assert s["server_unit"]["status"] == "changed"
    assert s["smoke"]["details"]["answer"] and "42" in s["smoke"]["details"]["answer"]
    assert s["throughput"]["details"]["result"]["output_throughput"] > 0
    assert s["throughput"]["details"]["result"]["failed"] == 0
    assert all(rec["duration_s"] >= 0 and "ssh_round_trips" in rec for rec in p["steps"])
    # What really happened on the host: one container with every GPU node, sglang active with the seeds' flags.
    conf = deploy_env.ssh("cat /etc/pve/lxc/120.conf").stdout
    assert len(re.findall(r"^dev\d+: /dev/nvidia\d+,", conf, re.MULTILINE)) == 8
    assert "unprivileged: 1" not in conf  # privileged, as the inventory says (PVE omits 0)
    unit = deploy_env.ct("cat /etc/systemd/system/sglang.service").stdout
    assert "--num-continuous-decode-steps 8" in unit and "--nsa-decode-backend trtllm" in unit
    assert "--tensor-parallel-size 8" in unit
    env_mode = deploy_env.ct("stat -c %a /etc/sglang/sglang.env").stdout.strip()
    assert env_mode == "600"
    pid_before = deploy_env.ct("systemctl show -p MainPID --value sglang").stdout.strip()

    second = deploy_env.run("--json", "up", "host", deploy_env.host)
    assert second.rc == 0, second.text
    q = second.json
    assert not q["changed"] and q["summary"] == "no changes"
    assert q["totals"]["ssh_round_trips_before_smoke"] <= 3
    # Nothing changed on a verified release: no bench loads the serving host (issue 50, item 13).
    assert steps(q)["throughput"]["status"] == "skipped", steps(q)["throughput"]
    assert "--bench runs it" in steps(q)["throughput"]["summary"] and "result" not in steps(q)["throughput"]["details"]
    # Its metrics ride on the lock's release: 3 round trips in all (facts with the lock, smoke, unlock).
    assert q["totals"]["ssh_round_trips"] == 3, q["totals"]
    assert steps(q)["unlock"]["details"]["metrics"] == "published"
    prom = deploy_env.ssh(f"stat -c %a {PROM_PATH}; cat {PROM_PATH}").stdout
    mode, _, text = prom.partition("\n")
    assert mode == "644"
    release = steps(q)["server_unit"]["details"].get("release") or re.search(r'release="([^"]+)"', text)[1]
    assert f'deploy_release_info{{host="{deploy_env.host}",release="{release}",' in text
    assert 'verdict="kept"' in text and "deploy_bench_output_throughput_tokens_per_second{" in text
    assert 'deploy_rollbacks_total{' in text and 'deploy_watchdog_state{' in text
    assert "sk-" not in text and "api" not in text.lower()
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert all(rec["status"] in ("ok", "skipped") for rec in q["steps"])
    assert deploy_env.ct("systemctl show -p MainPID --value sglang").stdout.strip() == pid_before
    # On request the converged run benches, and still changes nothing; --bench with --skip-bench is refused.
    third = deploy_env.run("--json", "up", "host", deploy_env.host, "--bench")
    assert third.rc == 0, third.text
    assert not third.json["changed"] and steps(third.json)["throughput"]["details"]["result"]["output_throughput"] > 0
    both = deploy_env.run("--json", "up", "host", deploy_env.host, "--bench", "--skip-bench")
    assert both.rc == 2 and "contradict" in both.json["what"], both.text
    assert deploy_env.ssh("ls /etc/pve/lxc").stdout.split() == ["120.conf"]


def test_plan_changes_nothing(deploy_env: DeployEnv) -> None:
    res = deploy_env.run("--json", "plan", "host", deploy_env.host)
    assert res.rc == 0, res.text
    p = res.json
    assert p["dry_run"] and p["changed"]
    assert any("create CT 120" in c for c in steps(p)["container"]["changes"])
    assert deploy_env.ssh("ls /etc/pve/lxc").stdout.strip() == ""


@pytest.mark.xdist_group(SHARED)
def test_live_verify_p2p_reads_container_and_host_in_one_round_trip(converged_shared: DeployEnv) -> None:
    converged = converged_shared
    res = converged.run("--json", "verify-p2p", "host", converged.host, "--bandwidth")
    assert res.rc == 0, res.text
    p = res.json
    assert p["verdict"]["status"] == "warn"  # all OK, but SYS pairs cross sockets on this box
    assert p["matches_host"]["same"] is True
    links = p["container_topology"]["links"]
    assert links["GPU0"]["GPU1"] == "PIX" and links["GPU0"]["GPU4"] == "SYS"
    assert p["totals"]["ssh_round_trips"] == 2  # facts (container + host) + the bandwidth probe
    bw = p["bandwidth"]
    assert bw["ok"] and len(bw["pairs"]) == 56
    assert all(pair["status"] == "ok" for pair in bw["pairs"])
