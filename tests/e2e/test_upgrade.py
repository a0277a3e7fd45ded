"""Pinning a newer sglang: renamed flags are caught before anything changes; fixed flags install and roll out."""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.conftest import SHARED, DeployEnv


@pytest.mark.xdist_group(SHARED)
def test_upgrade_that_renames_flags_is_refused_with_the_new_names(converged_shared: DeployEnv) -> None:
    converged = converged_shared
    unit_before = converged.ct("sha256sum /etc/systemd/system/sglang.service").stdout
    converged.set_profile(sglang_version="0.5.23")
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 2, res.text
    assert "--dsa-prefill-backend" in res.json["what"] + res.json["fix"]
    assert converged.ct("sha256sum /etc/systemd/system/sglang.service").stdout == unit_before
    assert converged.ct("/root/ml-env/bin/python -c 'import sglang; print(sglang.__version__)'").stdout.strip() \
        == "0.5.12.post1"


def test_upgrade_with_renamed_flags_installs_and_rolls_out(converged: DeployEnv) -> None:
    converged.set_profile(sglang_version="0.5.23",
                          flags={"nsa-prefill-backend": None, "nsa-decode-backend": None,
                                 "dsa-prefill-backend": "trtllm", "dsa-decode-backend": "trtllm"})
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 0, res.text
    steps = {s["name"]: s for s in res.json["steps"]}
    assert steps["sglang_install"]["status"] == "changed"
    assert steps["server_unit"]["status"] == "changed"
    unit = converged.ct("cat /etc/systemd/system/sglang.service").stdout
    assert "--dsa-prefill-backend trtllm" in unit and "--nsa-prefill-backend" not in unit
    assert "--tp-size 8" in unit  # 0.5.23's canonical name for tensor parallelism
    # 0.5.23 is a stack of its own, built beside the old venv (docs/stacks.md); the unit runs its interpreter.
    venv = f"/opt/deploy/stacks/{steps['sglang_install']['details']['stack']}"
    assert f"ExecStart={venv}/bin/python -m sglang.launch_server" in unit
    assert converged.ct(f"{venv}/bin/python -c 'import sglang; print(sglang.__version__)'").stdout.strip() == "0.5.23"
    assert converged.ct("/root/ml-env/bin/python -c 'import sglang; print(sglang.__version__)'").stdout.strip() \
        == "0.5.12.post1"


def test_missing_weights_are_named_and_skippable(converged: DeployEnv) -> None:
    converged.ct("mv /models/GLM-5-NVFP4/config.json /models/GLM-5-NVFP4/config.json.away")
    skipped = converged.run("--json", "up", "host", converged.host, "--skip-weights", "--skip-bench")
    assert skipped.rc == 0, skipped.text
    step = next(s for s in skipped.json["steps"] if s["name"] == "model_weights")
    assert step["status"] == "skipped" and "lukealonso/GLM-5-NVFP4" in step["summary"]
    # A hub that does not answer: the download is attempted, fails, and is named.
    sim_yaml = converged.inventory / "sim.yaml"
    good = sim_yaml.read_text()
    data = yaml.safe_load(good)
    hub = data["hosts"][converged.host]["container"]["hf_endpoint"]
    data["hosts"][converged.host]["container"]["hf_endpoint"] = hub.rsplit(":", 1)[0] + ":9"  # nothing listens
    sim_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 3 and res.json["step"] == "model_weights", res.text[-2000:]
    assert "weights download failed" in res.json["what"]
    # Without the flag, and the host's hub reachable, `hf download` brings the weights back.
    sim_yaml.write_text(good)
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 0, res.text[-2000:]
    step = next(s for s in res.json["steps"] if s["name"] == "model_weights")
    assert step["status"] == "changed", step
    assert converged.ct("test -f /models/GLM-5-NVFP4/config.json").rc == 0


@pytest.mark.timeout(600)  # several `up` runs with weight downloads, cut and resumed: 258-290 s on a loaded machine
def test_a_cut_download_fails_up_and_the_next_up_finishes_it_before_the_server_loads(converged: DeployEnv) -> None:
    """Issue 20: `hf download` writes config.json first and deletes partial files when it fails, so a cut
    download must not count as weights; the next `up` finishes it and only then starts the server. Issue 36
    item 9: the download takes the Xet path (the real hf_xet the container's huggingface_hub installs, against
    the simulated hub's CAS), so the cut is hf_xet's, named as the hub's Xet storage with the hosts to reach."""
    model = "/models/GLM-5-NVFP4"
    converged.ct(f"systemctl stop sglang && rm -rf {model}")
    converged.faults(hub_cut_after_bytes=600_000)  # the link to the hub goes down 600 kB into the download
    cut = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert cut.rc == 3 and cut.json["step"] == "model_weights", cut.text[-2000:]
    assert cut.json["what"].startswith("weights download failed in its Xet transfer (hf_xet fetches the files "
                                       "from the hub's Xet storage"), cut.json["what"]
    assert f"the weights at {model} are incomplete (" in cut.json["what"]
    assert "model-00001-of-00004.safetensors" in cut.json["what"] and cut.json["details"]["cause"] == "xet-transfer"
    assert "cas-server.xethub.hf.co" in cut.json["fix"]
    assert "re-running `deploy up` finishes the download" in cut.json["fix"]
    assert converged.ct(f"test -f {model}/config.json").rc == 0  # what real `hf download` leaves behind
    assert converged.ct(f"ls {model}/*.safetensors").rc != 0
    assert converged.ct("systemctl is-active sglang").stdout.strip() != "active"  # never started on partial weights
    plan = converged.run("--json", "plan", "host", converged.host)
    step = next(s for s in plan.json["steps"] if s["name"] == "model_weights")
    assert step["summary"].startswith(  # plan never downloads (it runs as --skip-weights)
        f"--skip-weights: would finish the download of lukealonso/GLM-5-NVFP4@main to {model}"), step

    converged.faults(hub_cut_after_bytes=None)
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 0, res.text[-2000:]
    steps = {s["name"]: s for s in res.json["steps"]}
    assert steps["model_weights"]["status"] == "changed" and f"({model} complete)" in steps["model_weights"]["summary"]
    sizes = converged.ct(f"stat -c '%s %n' {model}/*.safetensors").stdout.split()
    assert len(sizes) == 8 and len(set(sizes[0::2])) == 1 and int(sizes[0]) > 1 << 20  # four whole shards
    assert converged.ct("systemctl is-active sglang").stdout.strip() == "active"
    again = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert again.rc == 0 and next(s for s in again.json["steps"] if s["name"] == "model_weights")["status"] == "ok"


def test_a_disk_that_fills_during_the_download_is_named_and_the_next_up_finishes_once_there_is_room(
        converged: DeployEnv) -> None:
    """Issue 36 item 6: /models becomes a 3 MiB filesystem; the 4 MiB of shards fill it midway. `up` names the
    full disk with its df line and the space the rest needs (not the hub); grown to 8 MiB, the next `up` finishes."""
    model = "/models/GLM-5-NVFP4"
    converged.ct(f"systemctl stop sglang && rm -rf {model}")
    converged.ct_faults(small_disk="/models:3m")
    try:
        full = converged.run("--json", "up", "host", converged.host, "--skip-bench")
        assert full.rc == 3 and full.json["error"] == "disk-full", full.text[-2000:]
        what = full.json["what"]
        print(what, full.json["fix"], sep="\n")  # for -s runs (docs/troubleshooting.md)
        # hf deletes the partial files it was writing, so the df line (taken after) may show some room again
        assert what.startswith(f"the disk under {model} filled up during the weights download: `deploy-sim-disk "
                               "3.0M "), what
        assert " /models`; the rest of the download (" in what and " needs " in what, what
        assert full.json["details"]["need_bytes"] > full.json["details"]["free_bytes"], full.json["details"]
        assert "model hub" not in what + full.json["fix"] and "make room for at least" in full.json["fix"]
        assert converged.ct("systemctl is-active sglang").stdout.strip() != "active"
        converged.ct_faults(small_disk="/models:8m")  # the operator made room: the files written so far stay
        res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
        assert res.rc == 0, res.text[-2000:]
        step = next(s for s in res.json["steps"] if s["name"] == "model_weights")
        assert step["status"] == "changed" and step["changes"][0].startswith("finish the download of"), step
        assert converged.ct("systemctl is-active sglang").stdout.strip() == "active"
    finally:
        converged.ct_faults(small_disk=None)


def test_a_venv_without_hf_gets_its_own_hub_and_the_server_venv_keeps_its_pin(converged: DeployEnv) -> None:
    """Issue 36 item 7: the server's venv keeps the huggingface_hub sglang's transformers pins. A venv with no `hf`
    gets one in a venv of its own (/var/lib/deploy/hf-venv), never a pip install into the server's venv."""
    model = "/models/GLM-5-NVFP4"
    venv = "/root/ml-env"
    pinned = converged.ct(f"{venv}/bin/python -m pip show huggingface_hub | sed -n 's/^Version: //p'").stdout.strip()
    requires = converged.ct(f"{venv}/bin/python -m pip show sglang | sed -n 's/^Requires: //p'").stdout
    assert pinned.startswith("1.") and "huggingface_hub" in requires, (pinned, requires)
    converged.ct(f"systemctl stop sglang && rm -rf {model} {venv}/bin/hf")
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 0, res.text[-2000:]
    step = next(s for s in res.json["steps"] if s["name"] == "model_weights")
    assert step["status"] == "changed" and step["details"]["hub_client"].startswith("1."), step
    assert converged.ct("test -x /var/lib/deploy/hf-venv/bin/hf").rc == 0
    assert converged.ct(f"test -e {venv}/bin/hf").rc != 0  # nothing installed into the server's venv
    after = converged.ct(f"{venv}/bin/python -m pip show huggingface_hub | sed -n 's/^Version: //p'").stdout.strip()
    assert after == pinned
    check = converged.ct(f"{venv}/bin/python -m pip check")
    assert check.rc == 0, check.text
