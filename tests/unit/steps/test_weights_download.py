"""The weights download's failures, each with its own error (issue 36 items 5-7): a gated repo without a token, a
token without access, a token the hub does not know, a disk that filled up; and the hub token's way into the
container (stdin into a 0600 file, never argv)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import DiskFull, HubRefused, RemoteError, error_code
from orchestrator.inventory.models import SecretRef, hf_token_for
from orchestrator.parsers.weights import parse_download_output
from orchestrator.redact import forget_secrets, redact_text
from orchestrator.steps.software import hf_download_command
from tests.unit.steps.conftest import StepRun
from tests.unit.steps.test_provision_steps import CUT, RECORDED, inner, with_profile

REPO = "zai-org/GLM-5-NVFP4"
TOKEN = "hf_" + "Q" * 34
GATED_401 = ("hub-client\t1.33.0\nhub-refused\tGatedRepo\t401\tAccess to model zai-org/GLM-5-NVFP4 is restricted. You "
             "must have access to it and be authenticated to access it. Please log in.\n")
GATED_403 = ("hub-client\t1.33.0\nhub-refused\tGatedRepo\t403\tAccess to model zai-org/GLM-5-NVFP4 is restricted and "
             "you are not in the authorized list. Visit https://huggingface.co/zai-org/GLM-5-NVFP4 to ask for "
             "access.\n")
INVALID = "hub-client\t1.33.0\nhub-refused\t-\t401\tInvalid credentials in Authorization header\n"
ENOSPC = ("hub-client\t1.33.0\nFetching 10 files:  40%|####      | 4/10\n"
          "OSError: [Errno 28] No space left on device\n")
DF = "deploy-df\tdeploy-sim-disk  3.0M  3.0M     0 100% /models\ndisk\t0\t2097152\t2\n"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "hf-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    yield path
    forget_secrets()


def failing(run: StepRun, stderr: str, stdout: str = "", left: str = CUT) -> StepRun:
    run = with_profile(run, weights_repo=REPO)
    run.node.answer("hf download", stdout=stdout, rc=3 if "hub-refused" in stderr else 1, stderr=stderr)
    run.node.ct_after = {"weights": left}
    return run


def test_a_gated_repo_without_a_token_is_refused_with_the_hf_token_fix(make_run) -> None:
    run = failing(make_run({}, {"weights": "record\tnone\n"}), GATED_401)
    with pytest.raises(HubRefused) as err:
        run.step("model_weights")
    assert err.value.what.startswith(f"weights download refused: {REPO} is a gated model and the download sent no "
                                     "token (the model hub answered 401 GatedRepo: Access to model")
    assert "hf_token: {file:" in err.value.fix and "{env: HF_TOKEN}" in err.value.fix
    assert "check access to the model hub" not in err.value.fix
    assert error_code(err.value) == "hub-refused" and err.value.exit_code == 3


def test_each_answer_of_the_hub_to_a_token_has_its_own_error(make_run, token_file: Path) -> None:
    causes = {}
    for name, stderr in (("403", GATED_403), ("invalid", INVALID), ("401", GATED_401)):
        run = with_profile(make_run({}, {"weights": "record\tnone\n"}), hf_token=SecretRef(file=token_file))
        run.node.succeed("umask 077")  # the token's write; the download then fails as the hub answered
        run = failing(run, stderr)
        with pytest.raises(HubRefused) as err:
            run.step("model_weights")
        causes[name] = (err.value.what, err.value.fix)
    assert f"the token from file {token_file} has no access to the gated model {REPO}" in causes["403"][0]
    assert "request access on the model's page (https://huggingface.co/zai-org/GLM-5-NVFP4)" in causes["403"][1]
    assert f"the hub does not know the token from file {token_file}" in causes["invalid"][0]
    assert "create a new read token" in causes["invalid"][1]
    assert f"the hub did not accept the token from file {token_file}" in causes["401"][0]
    assert len({fix for _, fix in causes.values()}) == 3


def test_the_token_travels_on_stdin_into_a_0600_file_never_in_argv(make_run, token_file: Path) -> None:
    """One round trip: the download's own stdin carries the token into the file it reads (issue 50: the file was
    written in a round trip of its own, which a killed run could leave behind)."""
    run = with_profile(make_run({}, {"weights": "record\tnone\n"}), weights_repo=REPO,
                       hf_token=SecretRef(file=token_file))
    run.node.succeed("hf download")
    run.node.ct_after = {"weights": RECORDED}
    assert run.step("model_weights").status == "changed"
    [download] = [c for c in run.node.calls if c.kind in ("run", "script")]
    shell = inner(download.command)
    assert TOKEN not in download.command and download.stdin == TOKEN + "\n"
    assert "HF_TOKEN_PATH=/var/lib/deploy/hf-token " in shell and "IFS= read -r t" in shell
    assert shell.startswith("child=; trap 'rm -f /var/lib/deploy/hf-token /var/lib/deploy/hf-token.tmp' EXIT;")
    assert TOKEN not in redact_text(f"token={TOKEN} and {TOKEN}")  # registered with the redactor when read


@pytest.mark.parametrize("signal_name", ["TERM", "HUP", "INT"])
def test_the_token_file_lives_only_as_long_as_its_download(tmp_path: Path, signal_name: str) -> None:
    """The download's shell killed mid-download (a killed run drops its SSH connection): the file goes with it."""
    import signal
    import time

    from orchestrator.layout import PATHS
    from orchestrator.steps.software import with_token_file

    state = tmp_path / "state"
    body = f"cp {state}/hf-token {tmp_path}/seen && touch {tmp_path}/started && sleep 30"
    script = with_token_file(body).replace(PATHS.state_dir, str(state))
    proc = subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, text=True)
    assert proc.stdin is not None
    proc.stdin.write(TOKEN + "'; touch /tmp/x; '\n")
    proc.stdin.close()
    deadline = time.monotonic() + 20
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    token = state / "hf-token"
    assert token.read_text() == TOKEN + "'; touch /tmp/x; '\n" and token.stat().st_mode & 0o777 == 0o600
    proc.send_signal(getattr(signal, f"SIG{signal_name}"))
    proc.wait(timeout=20)
    assert not token.exists() and not (state / "hf-token.tmp").exists()
    assert (tmp_path / "seen").read_text() == TOKEN + "'; touch /tmp/x; '\n"


def test_the_host_token_wins_over_the_profile_token(make_run, token_file: Path) -> None:
    run = with_profile(make_run(), hf_token=SecretRef(env="PROFILE_HF_TOKEN"))
    assert hf_token_for(run.ctx.host, run.ctx.profile).describe() == "env $PROFILE_HF_TOKEN"
    host = run.ctx.host.model_copy(update={"hf_token": SecretRef(file=token_file)})
    assert hf_token_for(host, run.ctx.profile).describe() == f"file {token_file}"


def test_a_full_disk_is_named_with_its_df_line_and_the_space_the_rest_needs(make_run) -> None:
    run = failing(make_run({}, {"weights": "record\tnone\n"}), ENOSPC, stdout=DF)
    with pytest.raises(DiskFull) as err:
        run.step("model_weights")
    assert err.value.what == ("the disk under /models/GLM-5-NVFP4 filled up during the weights download: "
                              "`deploy-sim-disk 3.0M 3.0M 0 100% /models`; the rest of the download (2 file(s)) "
                              "needs 2.0 MiB, 0 B is free")
    assert "make room for at least 2.0 MiB more" in err.value.fix and "re-run `deploy up`" in err.value.fix
    assert "model hub" not in err.value.what + err.value.fix and error_code(err.value) == "disk-full"


def test_a_cut_link_is_still_the_hub_access_error(make_run) -> None:
    run = failing(make_run({}, {"weights": "record\tnone\n"}), "httpx.RemoteProtocolError: peer closed",
                  stdout="deploy-df\t/dev/sda1 100G 10G 90G 10% /\ndisk\t96636764160\t4194304\t4\n")
    with pytest.raises(RemoteError) as err:
        run.step("model_weights")
    assert type(err.value) is RemoteError and "check access to the model hub" in err.value.fix


#: The tail of a real `hf download` whose Xet transfer was cut (huggingface_hub 1.33, hf_xet 1.8.0, against the
#: simulator's hub with `hub_cut_after_bytes`): xet_get's RuntimeError after hf_xet's retries.
XET_CUT = ('  File "/var/lib/deploy/hf-venv/lib/python3.11/site-packages/huggingface_hub/file_download.py", '
           "line 589, in xet_get\n    with session.new_file_download_group(\n"
           "RuntimeError: Task error: File reconstruction error: CAS Client Error: Format error: I/O error: error "
           "decoding response body\n")


def test_a_cut_xet_transfer_is_named_as_the_hub_storage_not_the_hub(make_run) -> None:
    """Issue 36 item 9: hf_xet fetches from the hub's Xet storage (its CAS, the xorb URLs), which a site may not
    reach although it reaches the hub: the error says so, with the hosts, and that the next `up` finishes it."""
    run = failing(make_run({}, {"weights": "record\tnone\n"}), "hub-client\t1.33.0\n" + XET_CUT,
                  stdout="deploy-df\t/dev/sda1 100G 10G 90G 10% /\ndisk\t96636764160\t4194304\t4\n")
    with pytest.raises(RemoteError) as err:
        run.step("model_weights")
    what, fix = err.value.what, err.value.fix
    assert what.startswith("weights download failed in its Xet transfer (hf_xet fetches the files from the hub's "
                           "Xet storage, not from the hub itself): RuntimeError: Task error: File reconstruction "
                           "error: CAS Client Error"), what
    assert what.endswith("the weights at /models/GLM-5-NVFP4 are incomplete (model-00001-of-00004.safetensors, "
                         "model-00002-of-00004.safetensors, model-00003-of-00004.safetensors, "
                         "model-00004-of-00004.safetensors missing or short)"), what
    assert "cas-server.xethub.hf.co" in fix and "re-running `deploy up` finishes the download" in fix
    assert err.value.details["cause"] == "xet-transfer" and err.value.exit_code == 3
    assert parse_download_output("Xet Storage is enabled for this repo, but the 'hf_xet' package is not "
                                 "installed. Falling back to regular HTTP download.\n").xet_error == ""


def test_download_output_parses_the_marker_lines_only() -> None:
    out = parse_download_output(GATED_403 + "Fetching 10 files\n")
    assert out.hub_client == "1.33.0" and out.refusal is not None and out.refusal.status == "403"
    assert out.disk is None and not out.disk_full
    full = parse_download_output(ENOSPC + DF)
    assert full.disk_full and full.disk is not None and full.disk.df_line.endswith("100% /models")
    # a disk with room that the rest still does not fit counts as full, even before a write failed
    assert parse_download_output("disk\t1000\t5000\t1\n").disk_full
    assert not parse_download_output("disk\t9000\t5000\t1\n").disk_full
    assert parse_download_output("disk\tx\t5000\t1\n").disk is None


def test_the_command_keeps_the_server_venv_hub(make_run) -> None:
    """`hf` from the venv when it has one; else its own venv: a pip install into the server's venv would replace
    the huggingface_hub its transformers pins (issue 36 item 7)."""
    run = with_profile(make_run(), weights_repo=REPO)
    shell = hf_download_command(run.ctx)
    assert "/root/ml-env/bin/pip" not in shell
    assert shell.count("python3 -m venv /var/lib/deploy/hf-venv") == 1
