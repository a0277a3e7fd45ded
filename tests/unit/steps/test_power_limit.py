"""The GPUs' power limit as a managed setting: nvidia-smi's real lines parsed, a value out of any GPU's range
refused (exit 2) before anything is sent, the `power_limit` step (set, read back, unit), the unit's record and
doctor's `power-limit` check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.engine.state import RunInputs
from orchestrator.errors import ConfigError
from orchestrator.hardware.power_limit import (
    QUERY_COMMAND,
    common_range,
    in_force,
    parse_power_limits,
    parse_set_output,
    refusal,
    set_command,
)
from orchestrator.render.boot_unit import SEPARATOR, BootUnitState, parse_boot_unit
from orchestrator.render.power_unit import UNIT_NAME, PowerSetting, apply_script, recorded, render_power_unit
from orchestrator.verdicts.power_cap import power_finding

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi-pl"
RTX = "\n".join(FIX.joinpath("query.csv").read_text().splitlines()[:2]) + "\n"


def at(watts: float) -> str:
    return RTX.replace("600.00, 600.00, 300.00", f"{watts:.2f}, {watts:.2f}, 300.00")


def unit_fact(enabled: str, text: str | None) -> str:
    return f"{enabled}\n{SEPARATOR}\n{text or ''}"


def test_query_rows_parse_with_their_ranges_and_a_board_without_a_limit() -> None:
    gpus = parse_power_limits(FIX.joinpath("query.csv").read_text())
    assert [(g.index, g.limit_w, g.min_w, g.max_w, g.default_w) for g in gpus[:3]] == [
        (0, 600.0, 300.0, 600.0, 600.0), (1, 600.0, 300.0, 600.0, 600.0), (2, 700.0, 200.0, 700.0, 700.0)]
    assert gpus[0].bus_id == "00000000:06:00.0" and not gpus[3].manageable
    assert common_range(gpus) == (300.0, 600.0)  # the highest minimum, the lowest maximum
    assert "--format=csv,noheader,nounits" in QUERY_COMMAND and "power.min_limit" in QUERY_COMMAND


def test_a_value_out_of_range_is_refused_naming_each_gpu_range() -> None:
    gpus = parse_power_limits(FIX.joinpath("query.csv").read_text())
    why = refusal(gpus[:3], 250)
    assert why is not None and why.startswith("250 W is out of range: ")
    assert "GPU 0 allows 300 W to 600 W" in why and "GPU 1 allows 300 W to 600 W" in why and "GPU 2" not in why
    assert refusal(gpus[:3], 300) is None and refusal(gpus, 300, [0, 1]) is None
    assert "no software power limit" in (refusal(gpus, 300) or "")
    assert refusal(gpus, 300, [9]) == "no GPU 9 on this host (it has 0, 1, 2, 3)"


def test_real_set_lines_and_refusals_are_read() -> None:
    three = parse_set_output(FIX.joinpath("set-3gpus.txt").read_text())
    assert three.set == {f"00000000:{b}:00.0": (250.0, 300.0) for b in ("3B", "5E", "86")} and not three.refused
    one = parse_set_output(FIX.joinpath("set-all-done.txt").read_text())
    assert one.set == {"00000000:05:00.0": (110.0, 180.0)}
    for name in ("out-of-range.txt", "not-root.txt", "not-supported.txt"):
        said = parse_set_output(FIX.joinpath(name).read_text())
        assert said.set == {} and said.refused == [FIX.joinpath(name).read_text().splitlines()[0]]


def test_the_unit_records_the_limit_and_reapplies_it_after_the_driver() -> None:
    text = render_power_unit(PowerSetting(450, (0, 3)))
    lines = text.splitlines()
    assert "ExecStart=nvidia-smi -i 0,3 -pl 450" in lines and "Type=oneshot" in lines
    assert "RemainAfterExit=yes" in lines and "Before=pve-guests.service" in lines
    assert ("After=systemd-modules-load.service nvidia-persistenced.service deploy-nvidia-nodes.service" in lines)
    assert "WantedBy=multi-user.target" in lines
    assert recorded(BootUnitState(True, text)) == PowerSetting(450, (0, 3))
    assert recorded(BootUnitState(True, render_power_unit(PowerSetting(300)))) == PowerSetting(300)
    assert recorded(BootUnitState(False, None)) is None
    script = apply_script(PowerSetting(300))
    assert script.startswith("set -e\nnvidia-smi -pl 300\n")  # set first: a refusal records nothing
    assert f"systemctl enable {UNIT_NAME}" in script and 'KERNEL=="nvidia"' in script
    assert set_command(300, [1, 2]) == "nvidia-smi -i 1,2 -pl 300"


def test_doctor_checks_the_limit_in_force_against_the_record() -> None:
    text = render_power_unit(PowerSetting(450))
    ok = power_finding(parse_power_limits(at(450)), parse_boot_unit(unit_fact("enabled", text)), None, "h")
    assert (ok.status, ok.observed) == ("ok", f"450 W on every GPU in force, kept by {UNIT_NAME} (enabled)")
    drift = power_finding(parse_power_limits(RTX), parse_boot_unit(unit_fact("enabled", text)), None, "h")
    assert drift.status == "warn" and "GPU 0 is at 600 W" in drift.observed
    assert f"systemctl restart {UNIT_NAME}" in drift.fix
    off = power_finding(parse_power_limits(at(450)), parse_boot_unit(unit_fact("disabled", text)), None, "h")
    assert off.status == "warn" and f"systemctl enable {UNIT_NAME}" in off.fix
    plain = power_finding(parse_power_limits(RTX), parse_boot_unit(unit_fact("", None)), None, "h")
    assert plain.status == "ok" and plain.observed.startswith("not managed: 2 GPU(s) at 600 W")
    wanted = power_finding(parse_power_limits(RTX), parse_boot_unit(unit_fact("", None)), 400, "h")
    assert wanted.status == "warn" and wanted.fix.startswith("deploy power host h --set 400")


def test_the_step_refuses_out_of_range_before_sending_anything(make_run) -> None:
    run = make_run({"power_limits": RTX, "power_unit": unit_fact("", None)},
                   inputs=RunInputs(power_limit=PowerSetting(250)))
    with pytest.raises(ConfigError) as err:
        run.step("power_limit")
    assert err.value.exit_code == 2 and "GPU 0 allows 300 W to 600 W" in err.value.what
    assert "pick a limit from 300 to 600 W" in (err.value.fix or "")
    assert run.node.calls == []


def test_the_step_sets_reads_back_and_installs_then_leaves_it(make_run) -> None:
    run = make_run({"power_limits": RTX, "power_unit": unit_fact("", None)},
                   inputs=RunInputs(power_limit=PowerSetting(450)))
    run.node.answer("nvidia-smi -pl 450", "Power limit for GPU 00000000:06:00.0 was set to 450.00 W from 600.00 W.\n"
                    "Power limit for GPU 00000000:07:00.0 was set to 450.00 W from 600.00 W.\nAll done.\n")
    run.node.answer(QUERY_COMMAND, at(450))
    rec = run.step("power_limit")
    assert rec.status == "changed" and rec.changes[0].startswith("power limit 450 W on every GPU (now GPU 0 600 W")
    assert in_force(run.ctx.state.power_limits, 450)
    again = make_run({"power_limits": at(450), "power_unit": unit_fact("enabled", render_power_unit(
        PowerSetting(450)))}, inputs=RunInputs(power_limit=PowerSetting(450)))
    rec = again.step("power_limit")
    assert rec.status != "changed" and again.node.calls == []


def test_a_read_back_that_differs_fails_the_step(make_run) -> None:
    run = make_run({"power_limits": RTX, "power_unit": unit_fact("", None)},
                   inputs=RunInputs(power_limit=PowerSetting(450)))
    run.node.answer("nvidia-smi -pl 450", "All done.\n")
    run.node.answer(QUERY_COMMAND, RTX)
    with pytest.raises(Exception, match="read back is not 450 W"):
        run.step("power_limit")


def test_the_plan_shows_the_inventory_limit_without_changing(make_run) -> None:
    run = make_run({"power_limits": RTX, "power_unit": unit_fact("", None)}, dry_run=True)
    run.ctx.host = run.ctx.host.model_copy(update={"power_limit_w": 400})
    rec = run.step("power_limit")
    assert rec.status == "would-change" and rec.changes[0].startswith("power limit 400 W on every GPU")
    assert run.node.calls == []


def test_up_refuses_an_inventory_limit_out_of_range_before_any_step_changes_the_host(make_run) -> None:
    run = make_run({"power_limits": RTX, "power_unit": unit_fact("", None)})
    run.ctx.host = run.ctx.host.model_copy(update={"power_limit_w": 700})
    run.ctx.playbook_steps = ["host_prereqs", "boot_nodes", "power_limit"]
    with pytest.raises(ConfigError) as err:
        run.step("host_prereqs")
    assert "700 W is out of range: GPU 0 allows 300 W to 600 W" in err.value.what and run.node.calls == []


def test_the_constructed_query_carries_the_real_q_readings_of_its_gpus() -> None:
    """query.csv is constructed; its RTX PRO 6000 rows must say what the real `nvidia-smi -q` of that box says
    (current, min, max and default limit), or every range the tests refuse is invented."""
    q = (FIX.parent / "nvidia-smi" / "rtx-pro-6000-x8-bare" / "q.txt").read_text()
    real = {k: float(v) for k, v in re.findall(
        r"^ {8}(Current|Min|Max|Default) Power Limit\s+: ([\d.]+) W$", q, re.M)[:4]}
    gpu = parse_power_limits(RTX)[0]
    assert (gpu.limit_w, gpu.min_w, gpu.max_w, gpu.default_w) == (
        real["Current"], real["Min"], real["Max"], real["Default"])
