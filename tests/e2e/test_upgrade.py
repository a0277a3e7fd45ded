"""Pinning a newer sglang: renamed flags are caught before anything changes; fixed flags install and roll out."""

from __future__ import annotations

import yaml

from tests.e2e.conftest import DeployEnv


def test_upgrade_that_renames_flags_is_refused_with_the_new_names(converged: DeployEnv) -> None:
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
    assert converged.ct("/root/ml-env/bin/python -c 'import sglang; print(sglang.__version__)'").stdout.strip() \
        == "0.5.23"


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
