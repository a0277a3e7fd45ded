"""Provisioning a bare container: packages, venv + sglang from an index, weights by `hf download` or a host mount.

Facts in, commands out: every command below is what the real container adapter would send to the PVE node.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import CheckFailed, ConfigError, RemoteError
from orchestrator.facts import CT, CT_PACKAGES, HOST
from orchestrator.parsers.weights import RECORD_PATH, WeightsState, parse_weights_check
from orchestrator.scripts import render_script
from orchestrator.steps.container import mount_plan
from tests.unit.steps.conftest import StepRun, out, with_container
from tests.unit.steps.test_container_step import converged_config, host_facts, pve_accepts

ALL_INSTALLED = "".join(f"{p}\tinstalled\n" for p in CT_PACKAGES)
BARE = out("ca-certificates\tinstalled\npython3\tinstalled\n", 1,
           "dpkg-query: no packages found matching curl\ndpkg-query: no packages found matching patch\n"
           "dpkg-query: no packages found matching python3-venv\ndpkg-query: no packages found matching gcc\n"
           "dpkg-query: no packages found matching g++\ndpkg-query: no packages found matching python3-dev\n")
NO_SGLANG = out("", 1, "ModuleNotFoundError: No module named 'sglang'")


def with_profile(run: StepRun, **update: object) -> StepRun:
    run.ctx.profile = run.ctx.profile.model_copy(update=update)
    return run


def inner(command: str) -> str:
    """The shell snippet a `pct exec 120 -- bash -c SNIPPET` command runs in the container."""
    argv = shlex.split(command)
    assert argv[:6] == ["pct", "exec", "120", "--", "bash", "-c"], argv[:6]
    return argv[6]


# ------------------------------------------------------------------------------------------- ct_packages
def test_the_packages_fact_is_one_dpkg_query_for_the_required_set(make_run) -> None:
    run = make_run()
    cmd = CT.missing_pkgs.command(run.ctx.host, run.ctx.profile)
    assert cmd == ("dpkg-query -W -f '${Package}\\t${db:Status-Status}\\n' "
                   "ca-certificates curl patch python3 python3-venv gcc g++ python3-dev")


def test_nothing_missing_changes_nothing_and_costs_no_round_trip(make_run) -> None:
    run = make_run({}, {"missing_pkgs": ALL_INSTALLED})
    rec = run.step("ct_packages")
    assert rec.status == "ok" and rec.changes == [] and run.node.calls == []


def test_missing_packages_get_one_update_and_one_noninteractive_install(make_run) -> None:
    run = make_run({}, {"missing_pkgs": BARE})
    run.node.ct_after = {"missing_pkgs": ALL_INSTALLED}
    run.node.succeed("apt-get")
    rec = run.step("ct_packages")
    assert rec.status == "changed"
    assert rec.changes == ["apt-get install curl, patch, python3-venv, gcc, g++, python3-dev in CT 120"]
    [apt] = run.node.commands("run")
    shell = inner(apt)
    assert shell.count("apt-get") == 2 and shell.count(" update") == 1
    assert shell.startswith("export DEBIAN_FRONTEND=noninteractive; apt-get -q update && apt-get ")
    assert "-y --no-install-recommends" in shell
    assert shell.endswith(" install curl patch python3-venv gcc g++ python3-dev")
    assert "Proxy" not in shell
    assert rec.summary == "installed curl, patch, python3-venv, gcc, g++, python3-dev"
    assert [c.what for c in run.node.calls] == ["apt-get install", "re-reading container facts"]


def test_the_inventorys_apt_proxy_is_passed_to_both_apt_calls_quoted(make_run) -> None:
    run = with_container(make_run({}, {"missing_pkgs": BARE}), apt_proxy="http://10.9.0.2:3142")
    run.node.ct_after = {"missing_pkgs": ALL_INSTALLED}
    run.node.succeed("apt-get")
    rec = run.step("ct_packages")
    assert "through http://10.9.0.2:3142" in rec.changes[0]
    shell = inner(run.node.commands("run")[0])
    assert shell.count("-o Acquire::http::Proxy=http://10.9.0.2:3142 ") == 2


def test_packages_still_missing_after_apt_are_a_check_failure(make_run) -> None:
    run = make_run({}, {"missing_pkgs": BARE})
    run.node.ct_after = {"missing_pkgs": BARE}
    run.node.succeed("apt-get")
    with pytest.raises(CheckFailed) as err:
        run.step("ct_packages")
    assert "still lacks curl, patch, python3-venv, gcc, g++, python3-dev" in err.value.what


def test_a_failing_apt_names_the_proxy_setting_in_its_fix(make_run) -> None:
    run = make_run({}, {"missing_pkgs": BARE})
    run.node.answer("apt-get", "", rc=100, stderr="E: Unable to locate package python3-venv")
    with pytest.raises(RemoteError) as err:
        run.step("ct_packages")
    assert "Unable to locate package" in err.value.what and "container.apt_proxy" in (err.value.fix or "")


def test_plan_says_which_packages_it_would_install(make_run) -> None:
    run = make_run({}, {"missing_pkgs": BARE}, dry_run=True)
    rec = run.step("ct_packages")
    assert rec.status == "would-change"
    assert rec.summary == "apt-get install curl, patch, python3-venv, gcc, g++, python3-dev in CT 120"
    assert run.node.calls == []


def test_plan_for_a_container_not_created_yet_names_the_required_set(make_run) -> None:
    run = make_run({"ct_status": out("", 2)}, None, dry_run=True)
    rec = run.step("ct_packages")
    assert rec.status == "would-change" and "ca-certificates, curl, patch, python3, python3-venv" in rec.summary


# ------------------------------------------------------------------------------------------ sglang_install
def test_venv_and_pinned_sglang_with_extras_from_the_configured_index(make_run) -> None:
    run = with_container(make_run({}, {"sglang_version": NO_SGLANG}), pip_index_url="http://10.9.0.2:8080/simple/")
    with_profile(run, sglang_extras=["srt"])
    run.node.answer("dist-info/METADATA", "0.5.12.post1\n")  # pip's record of sglang, read after the install
    run.node.succeed("pip install", ".json.tmp")
    rec = run.step("sglang_install")
    assert rec.status == "changed" and "from http://10.9.0.2:8080/simple/" in rec.changes[0]
    shell = inner(run.node.commands("run")[0])
    # The profile's constraints (kernels<0.15) are written into the venv and given to pip with -c.
    assert shell.startswith("test -x /root/ml-env/bin/python || python3 -m venv /root/ml-env && printf '%s' "
                            "'kernels<0.15\n' > /root/ml-env/deploy-constraints.txt && "
                            "PIP_CACHE_DIR=/opt/deploy/stacks/.pip-cache /root/ml-env/bin/pip install ")
    # The requirement is one quoted word (brackets are shell globs); an http index is trusted by its host:port.
    assert shell.endswith(" --index-url http://10.9.0.2:8080/simple/ --trusted-host 10.9.0.2:8080 "
                          "-c /root/ml-env/deploy-constraints.txt 'sglang[srt]==0.5.12.post1'")


def test_an_https_index_is_not_marked_trusted(make_run) -> None:
    run = with_container(make_run({}, {"sglang_version": NO_SGLANG}), pip_index_url="https://pypi.example/simple")
    run.node.answer("dist-info/METADATA", "0.5.12.post1\n")  # pip's record of sglang, read after the install
    run.node.succeed("pip install", ".json.tmp")
    run.step("sglang_install")
    shell = inner(run.node.commands("run")[0])
    assert "--index-url https://pypi.example/simple " in shell and "--trusted-host" not in shell
    assert shell.endswith(" sglang==0.5.12.post1")


def test_pip_failure_points_at_the_index_setting(make_run) -> None:
    run = make_run({}, {"sglang_version": NO_SGLANG})
    run.node.answer("pip install", "", rc=1, stderr="ERROR: No matching distribution found for sglang==0.5.12.post1")
    with pytest.raises(RemoteError) as err:
        run.step("sglang_install")
    assert "No matching distribution" in err.value.what and "pip_index_url" in (err.value.fix or "")


# ------------------------------------------------------------------------------------------- model_weights
COMMIT = "4f5e6d7c8b9a4f5e6d7c8b9a4f5e6d7c8b9a4f5e"
RECORDED = f"record\tdeploy\tzai-org/GLM-5-NVFP4\t{COMMIT}\n"
#: What a cut `hf download` leaves: the small files (config.json, the index) but no shard (partials are deleted).
CUT = ("record\tindex\n" + "".join(f"missing\tmodel-0000{i}-of-00004.safetensors\tnone\t?\n" for i in range(1, 5)))


def test_missing_weights_are_fetched_with_hf_download_from_the_venv_through_the_endpoint(make_run) -> None:
    run = with_container(make_run({}, {"weights": "record\tnone\n"}), hf_endpoint="http://10.9.0.2:8081",
                         pip_index_url="http://10.9.0.2:8080/simple")
    with_profile(run, weights_repo="zai-org/GLM-5-NVFP4")
    run.node.ct_after = {"weights": RECORDED}
    run.node.succeed("hf download")
    rec = run.step("model_weights")
    assert rec.status == "changed"
    assert rec.summary == "downloaded zai-org/GLM-5-NVFP4 at 4f5e6d7c8b9a (/models/GLM-5-NVFP4 complete)"
    shell = inner(run.node.commands("run")[0])
    # `hf` is the venv's own when it has one; else it comes from the same index into a venv of its own (never into
    # the server's venv, whose huggingface_hub its transformers pins); huggingface-cli is gone.
    assert shell.startswith("if test -x /root/ml-env/bin/hf; then hf_env=/root/ml-env; else "
                            "hf_env=/var/lib/deploy/hf-venv && { test -x /var/lib/deploy/hf-venv/bin/hf || "
                            "{ python3 -m venv /var/lib/deploy/hf-venv && /var/lib/deploy/hf-venv/bin/pip install ")
    assert ("--index-url http://10.9.0.2:8080/simple --trusted-host 10.9.0.2:8080 'huggingface_hub>=1.0,<3'; }; }; "
            "fi && ") in shell
    assert "/root/ml-env/bin/pip" not in shell
    assert ("export HF_HUB_DISABLE_UPDATE_CHECK=1 HF_HUB_DISABLE_TELEMETRY=1 HF_ENDPOINT=http://10.9.0.2:8081 "
            in shell)
    # the revision is resolved once, downloaded at that commit, and the hub's file list of it checked and recorded
    assert " resolve zai-org/GLM-5-NVFP4 main) && " in shell
    assert ('"$hf_env"/bin/hf download zai-org/GLM-5-NVFP4 --revision "$commit" --local-dir /models/GLM-5-NVFP4 '
            '|| ') in shell
    assert shell.endswith(' record zai-org/GLM-5-NVFP4 "$commit" /models/GLM-5-NVFP4 .cache/deploy/weights.tsv')
    assert "HF_TOKEN" not in shell and "hf-token" not in shell  # no hf_token: no token file
    assert "huggingface-cli" not in shell


def test_a_cut_download_with_config_json_is_finished_not_skipped(make_run) -> None:
    run = with_profile(make_run({}, {"weights": CUT}), weights_repo="zai-org/GLM-5-NVFP4")
    run.node.succeed("hf download")
    run.node.ct_after = {"weights": RECORDED}
    rec = run.step("model_weights")
    assert rec.status == "changed" and rec.changes[0].startswith(
        "finish the download of zai-org/GLM-5-NVFP4@main to /models/GLM-5-NVFP4")
    assert "4 file(s) missing or short: model-00001-of-00004.safetensors" in rec.changes[0]
    assert run.node.sent("hf download zai-org/GLM-5-NVFP4")
    # every shard there but no record of a finished download (e.g. weights fetched by an older deploy): checked
    # against the hub's file list once, through the same command
    run = with_profile(make_run({}, {"weights": "record\tindex\n"}), weights_repo="zai-org/GLM-5-NVFP4")
    run.node.succeed("hf download")
    run.node.ct_after = {"weights": RECORDED}
    assert run.step("model_weights").changes[0].startswith(
        "check /models/GLM-5-NVFP4 against the file list of zai-org/GLM-5-NVFP4@main and record it")
    # a recorded, complete download is left alone: not one command
    run = with_profile(make_run({}, {"weights": RECORDED}), weights_repo="zai-org/GLM-5-NVFP4")
    run.node.succeed("hf download")
    assert run.step("model_weights").status == "ok" and run.node.calls == []


def test_a_download_that_stays_incomplete_is_a_check_failure(make_run) -> None:
    run = with_profile(make_run({}, {"weights": "record\tnone\n"}), weights_repo="zai-org/GLM-5-NVFP4")
    run.node.succeed("hf download")
    run.node.ct_after = {"weights": RECORDED + "missing\tmodel-00002-of-00004.safetensors\t1000\t1048672\n"}
    with pytest.raises(CheckFailed) as err:
        run.step("model_weights")
    assert "are not complete: model-00002-of-00004.safetensors (1000 of 1048672 bytes)" in err.value.what


def test_a_failed_download_names_what_it_left_missing(make_run) -> None:
    run = with_profile(make_run({}, {"weights": "record\tnone\n"}), weights_repo="zai-org/GLM-5-NVFP4")
    run.node.answer("hf download", stdout="", rc=1, stderr="httpx.RemoteProtocolError: peer closed connection")
    run.node.ct_after = {"weights": CUT}
    with pytest.raises(RemoteError) as err:
        run.step("model_weights")
    assert "weights download failed; the weights at /models/GLM-5-NVFP4 are incomplete" in err.value.what
    assert "model-00001-of-00004.safetensors" in err.value.what and "peer closed connection" in err.value.what
    assert "re-running `deploy up` finishes the download" in err.value.fix


def test_mounted_weights_are_checked_never_downloaded(make_run) -> None:
    run = with_container(make_run({}, {"weights": "record\tindex\n"}), model_mount="/tank/models/glm5")
    with_profile(run, weights_repo="zai-org/GLM-5-NVFP4")
    rec = run.step("model_weights")
    assert rec.status == "ok" and "(host /tank/models/glm5)" in rec.summary and run.node.calls == []

    run = with_container(make_run({}, {"weights": "record\tnone\n"}), model_mount="/tank/models/glm5")
    with_profile(run, weights_repo="zai-org/GLM-5-NVFP4")
    with pytest.raises(CheckFailed) as err:
        run.step("model_weights")
    assert "/tank/models/glm5" in err.value.what and run.node.calls == []


def test_a_mount_with_missing_shards_is_refused_naming_them(make_run) -> None:
    run = with_container(make_run({}, {"weights": CUT}), model_mount="/tank/models/glm5")
    with_profile(run, weights_repo="zai-org/GLM-5-NVFP4")
    with pytest.raises(CheckFailed) as err:
        run.step("model_weights")
    assert "the weights in host directory /tank/models/glm5 (mounted at /models/GLM-5-NVFP4) are incomplete: " \
           "4 file(s) missing or short: model-00001-of-00004.safetensors, model-00002" in err.value.what
    assert err.value.details["missing"][3] == "model-00004-of-00004.safetensors" and run.node.calls == []


def _weights_check(model_dir: Path) -> WeightsState:
    """The weights fact, run by a real bash on a local directory."""
    script = render_script("weights_check.sh.j2", model_path=str(model_dir), record_path=RECORD_PATH)
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    return parse_weights_check(res.stdout)


def test_the_weights_fact_trusts_only_a_complete_file_list(tmp_path: Path) -> None:
    from simulator.software.hub import glm5_repo

    d = tmp_path / "GLM-5-NVFP4"
    assert _weights_check(d).record == "none"
    repo = glm5_repo(shard_bytes=4096)
    for f in repo.values():  # what a cut `hf download` leaves: the small files, no shard
        if not f.lfs:
            (d / f.path).parent.mkdir(parents=True, exist_ok=True)
            (d / f.path).write_bytes(f.data)
    cut = _weights_check(d)
    assert cut.record == "index" and not cut.complete
    assert [m.path for m in cut.missing] == sorted(p for p, f in repo.items() if f.lfs)
    for f in repo.values():
        (d / f.path).write_bytes(f.data)
    assert _weights_check(d).complete and not _weights_check(d).recorded  # a full mount, never recorded
    record = d / RECORD_PATH
    record.parent.mkdir(parents=True)
    record.write_text(f"lukealonso/GLM-5-NVFP4\t{COMMIT}\n"
                      + "".join(f"{len(f.data)}\t{f.path}\n" for f in repo.values()))
    assert _weights_check(d).recorded and _weights_check(d).commit == COMMIT
    shard = d / "model-00002-of-00004.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    short = _weights_check(d)
    assert not short.complete and short.missing_summary() == \
        f"model-00002-of-00004.safetensors (100 of {len(repo[shard.name].data)} bytes)"


# ------------------------------------------------------------------------------ container: the model mount
def test_mount_plan_picks_a_free_mp_key_or_rewrites_the_one_at_the_model_path() -> None:
    assert mount_plan({}, None, "/models/m") == {}
    assert mount_plan({"mp0": "/data,mp=/data"}, "/tank/m", "/models/m") == {"mp1": "/tank/m,mp=/models/m"}
    assert mount_plan({"mp3": "/tank/m,mp=/models/m"}, "/tank/m", "/models/m") == {}
    assert mount_plan({"mp3": "/old,mp=/models/m/"}, "/tank/m", "/models/m") == {"mp3": "/tank/m,mp=/models/m"}


def test_a_running_container_gets_the_mount_as_mp_with_a_restart(make_run) -> None:
    probe = make_run()
    run = make_run({**host_facts("status: running\n", converged_config(probe)), "model_mount": "present\n"}, {})
    with_container(run, model_mount="/tank/models/glm5")
    run.node.ct_after = {"weights": "present\n"}
    pve_accepts(run.node)
    rec = run.step("container")
    assert rec.status == "changed"
    # mp0 is the kernel cache's mount (converged): the model's takes the next free key
    assert any("mp1: (unset) → /tank/models/glm5,mp=/models/GLM-5-NVFP4" in c for c in rec.changes)
    commands = run.node.commands("run")
    put = next(c for c in commands if c.startswith("pvesh set /nodes/pve-gpu-1/lxc/120/config"))
    assert "--mp1 /tank/models/glm5,mp=/models/GLM-5-NVFP4" in put and "--digest d1" in put
    # Mount points apply at start: shut down, set, start again.
    assert commands.index(next(c for c in commands if "status/shutdown" in c)) < commands.index(put)
    assert run.node.sent("lxc/120/status/start")


def test_a_model_mount_missing_on_the_host_is_refused_before_any_change(make_run) -> None:
    probe = make_run()
    run = make_run({**host_facts("status: running\n", converged_config(probe)), "model_mount": "absent\n"}, {})
    with_container(run, model_mount="/tank/models/glm5")
    with pytest.raises(ConfigError) as err:
        run.step("container")
    assert "/tank/models/glm5 is not a directory on pve-gpu-1" in err.value.what
    assert run.node.calls == []


def test_the_mount_fact_is_quoted(make_run) -> None:
    run = with_container(make_run(), model_mount="/tank/models/glm5+v2")
    assert HOST.model_mount.command(run.ctx.host, run.ctx.profile) == (
        "test -d /tank/models/glm5+v2 && echo present || echo absent")


def test_create_carries_the_mount(make_run) -> None:
    run = make_run({**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                    "model_mount": "present\n"})
    with_container(run, model_mount="/tank/models/glm5")
    run.node.ct_after = {}
    pve_accepts(run.node)
    run.step("container")
    create = next(c for c in run.node.commands("run") if c.startswith("pvesh create /nodes/pve-gpu-1/lxc "))
    assert "--mp0 /tank/models/glm5,mp=/models/GLM-5-NVFP4" in create
    assert json.dumps("mp0") in json.dumps(run.ctx.records[-1].details["create"])


def test_the_kernel_cache_dir_is_created_owned_by_the_ct_root_before_the_create(make_run) -> None:
    run = make_run({**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                    "kernel_cache_dir": "absent\n"})
    run.node.ct_after = {}
    pve_accepts(run.node)
    run.node.answer("mkdir -p /var/lib/deploy/kernel-cache && mkdir -m 0755 /var/lib/deploy/kernel-cache/120", "")
    run.step("container")
    commands = run.node.commands("run")
    made = next(i for i, c in enumerate(commands) if c.startswith(
        "mkdir -p /var/lib/deploy/kernel-cache && mkdir -m 0755 /var/lib/deploy/kernel-cache/120 && "
        ": > /var/lib/deploy/kernel-cache/120/.deploy-made-this-dir && chown 0:0 /var/lib/deploy/kernel-cache/120"))
    create = next(i for i, c in enumerate(commands) if c.startswith("pvesh create /nodes/pve-gpu-1/lxc "))
    assert made < create and "--mp0 /var/lib/deploy/kernel-cache/120,mp=/var/cache/deploy/kernels" in \
        commands[create]


def test_a_kernel_cache_dir_that_cannot_be_made_is_refused_before_any_change(make_run) -> None:
    run = make_run({**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                    "kernel_cache_dir": "absent\n"})
    run.node.answer("mkdir -p /var/lib/deploy/kernel-cache", "mkdir: cannot create directory: Read-only "
                    "file system\n", rc=1)
    with pytest.raises(ConfigError) as err:
        run.step("container")
    assert "the kernel cache directory /var/lib/deploy/kernel-cache/120 cannot be created" in err.value.what
    assert "Read-only file system" in err.value.what and "container.kernel_cache" in (err.value.fix or "")
    assert not run.node.sent("pvesh create")


def test_a_running_container_gets_a_new_kernel_cache_mount_without_a_restart(make_run) -> None:
    """A host converged by an earlier deploy: the cache mount is new, PVE hotplugs a new mount point into a running
    CT, so the serving container is not shut down for it (the model mount's test above restarts)."""
    probe = make_run()
    config = {k: v for k, v in converged_config(probe).items() if "/var/cache/deploy/kernels" not in str(v)}
    run = make_run({**host_facts("status: running\n", config), "model_mount": "present\n"}, {})
    pve_accepts(run.node)
    run.node.answer("pvesh get /nodes/pve-gpu-1/lxc/120/pending", "[]")
    rec = run.step("container")
    assert rec.status == "changed"
    assert any("mp0: (unset) → /var/lib/deploy/kernel-cache/120,mp=/var/cache/deploy/kernels" in c
               for c in rec.changes), rec.changes
    assert not run.node.sent("status/shutdown") and "restart_because" not in rec.details
    assert not any(c.startswith("restart CT") for c in rec.changes)


def test_a_kernel_cache_dir_deploy_did_not_make_is_never_chowned(make_run) -> None:
    """Issue 50 item 4: `container.kernel_cache: /srv/shared` (a directory someone else made, owned by 1000:1000):
    before, `up` ran `chown 100000:100000` and `chmod 0755` on it (a node's /tmp lost its sticky bit this way). Now it
    is refused before any change, with the fix."""
    run = make_run({**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                    "kernel_cache_dir": "1000:1000\n"})
    with pytest.raises(ConfigError) as err:
        run.step("container")
    assert "exists, owned by 1000:1000, and deploy did not make it" in err.value.what
    assert "chown 0:0 /var/lib/deploy/kernel-cache/120" in (err.value.fix or "")
    assert not any("chown" in c or "chmod" in c for c in run.node.commands("run"))
    assert not run.node.sent("pvesh create")


def test_a_kernel_cache_dir_deploy_made_is_chowned_back(make_run) -> None:
    run = make_run({**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                    "kernel_cache_dir": "1000:1000\n.deploy-made-this-dir\n"})
    run.node.ct_after = {}
    pve_accepts(run.node)
    run.node.answer("chown 0:0 /var/lib/deploy/kernel-cache/120", "")
    run.step("container")
    assert "chown 0:0 /var/lib/deploy/kernel-cache/120" in run.node.commands("run")


def test_plan_names_the_kernel_cache_dir_it_would_make(make_run) -> None:
    run = make_run({**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                    "kernel_cache_dir": "absent\n"}, dry_run=True)
    rec = run.step("container")
    assert rec.status == "would-change"
    assert "create the kernel cache directory /var/lib/deploy/kernel-cache/120 on pve-gpu-1" in rec.summary, rec.summary
    assert not any(c.startswith("mkdir") for c in run.node.commands("run"))
