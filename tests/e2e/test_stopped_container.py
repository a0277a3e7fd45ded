"""A converged host whose container was stopped: status says so, and plan predicts exactly what up then does."""

from __future__ import annotations

from tests.e2e.conftest import DeployEnv


def test_stopped_container_status_says_so_and_plan_predicts_up(converged: DeployEnv) -> None:
    host = converged.host
    assert converged.ssh("pct stop 120").rc == 0

    status = converged.run("status", "host", host)
    assert status.rc == 1, status.text
    assert "CT 120 is stopped" in status.stdout and f"deploy up host {host}" in status.stdout, status.text
    assert "release none" not in status.stdout and "sglang unknown" not in status.stdout
    as_json = converged.run("--json", "status", "host", host)
    assert as_json.json["container"] == "stopped" and not as_json.json["ok"]

    plan = converged.run("--json", "plan", "host", host)
    assert plan.rc == 0, plan.text
    planned = {s["name"]: s for s in plan.json["steps"]}
    assert planned["container"]["changes"] == ["start CT 120"]
    predicted = sorted(name for name, s in planned.items() if s["status"] == "would-change")
    for name in ("driver_userspace", "sglang_install", "model_weights", "server_unit"):
        assert planned[name]["status"] == "skipped" and "CT 120 is stopped" in planned[name]["summary"]
    assert converged.ssh("pct status 120").stdout.strip() == "status: stopped"  # plan changed nothing

    up = converged.run("--json", "up", "host", host, "--skip-bench")
    assert up.rc == 0, up.text
    ran = {s["name"]: s for s in up.json["steps"]}
    done = sorted(name for name, s in ran.items() if s["status"] == "changed")
    assert predicted == ["container"] and ran["container"]["changes"] == ["start CT 120"]
    # Nothing inside is reinstalled. The unit is the same; sglang is only started when the CT's boot did not
    # (the simulated systemd does not start enabled units at boot, real systemd does): the plan said so.
    if "watchdog" in done:  # its timer, like sglang, is started by `up` when the boot did not start it
        assert ran["watchdog"]["changes"][0].startswith("start the watchdog's timer"), ran["watchdog"]
        assert "the installed watchdog" in planned["watchdog"]["summary"]
        done.remove("watchdog")
    assert done in (["container"], ["container", "server_unit"]), done
    if "server_unit" in done:
        assert ran["server_unit"]["changes"] == ["start sglang (unit unchanged)"]
        assert "sglang is started then if its boot did not" in planned["server_unit"]["summary"]
    assert converged.run("status", "host", host).rc == 0
