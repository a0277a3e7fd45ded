"""Secrets stay out of units, argv of our commands and output; host keys are checked strictly."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import yaml

from tests.e2e.conftest import DeployEnv


def test_api_key_lives_only_in_0600_files(deploy_env: DeployEnv, tmp_path: Path) -> None:
    key = "sk-" + secrets.token_hex(16)
    key_file = tmp_path / "sglang-api-key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    deploy_env.set_profile(api_key={"file": str(key_file)})
    res = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert res.rc == 0, res.text
    assert key not in res.stdout and key not in res.stderr
    unit = deploy_env.ct("cat /etc/systemd/system/sglang.service").stdout
    assert key not in unit and "--config /etc/sglang/secrets.yaml" in unit and "SGLANG_API_KEY" not in unit
    for path in ("/etc/sglang/sglang.env", "/etc/sglang/secrets.yaml"):
        assert deploy_env.ct(f"stat -c %a {path}").stdout.strip() == "600"
        assert key in deploy_env.ct(f"cat {path}").stdout
    # The server really requires the key: without it 401, and the smoke check (which reads the env file) passed.
    code = deploy_env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models").stdout
    assert code in ("401", "403")
    rendered = deploy_env.run("render", "host", deploy_env.host, "--devices-file",
                              str(Path(__file__).parents[1] / "fixtures/nvidia-smi/h200x2-device/ls-dev-nvidia.txt"),
                              "--proc-devices-file",
                              str(Path(__file__).parents[1] / "fixtures/nvidia-smi/h200x2-device/proc-devices.txt"))
    assert rendered.rc == 0 and key not in rendered.text and "<redacted>" in rendered.text
    for path in Path(deploy_env.env["DEPLOY_STATE_DIR"]).rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_world_readable_secret_file_is_refused_before_any_change(deploy_env: DeployEnv, tmp_path: Path) -> None:
    key_file = tmp_path / "loose-key"
    key_file.write_text("sk-loose\n")
    key_file.chmod(0o644)
    deploy_env.set_profile(api_key={"file": str(key_file)})
    res = deploy_env.run("--json", "up", "host", deploy_env.host)
    assert res.rc == 2
    assert "chmod 600" in res.json["fix"]
    assert deploy_env.ssh("ls /etc/pve/lxc").stdout.strip() == ""


def _point_known_hosts(env: DeployEnv, path: Path) -> None:
    sim_yaml = env.inventory / "sim.yaml"
    data = yaml.safe_load(sim_yaml.read_text())
    data["hosts"][env.host]["ssh"]["known_hosts"] = str(path)
    sim_yaml.write_text(yaml.safe_dump(data))


def test_unknown_host_key_is_refused_unless_tofu(deploy_env: DeployEnv, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    _point_known_hosts(deploy_env, known)
    res = deploy_env.run("--json", "doctor", "host", deploy_env.host)
    assert res.rc == 3
    assert "strict host key checking refused" in res.json["what"] and "--tofu" in res.json["fix"]
    assert not known.exists() or known.read_text() == ""
    ok = deploy_env.run("--json", "doctor", "host", deploy_env.host, "--tofu")
    assert ok.rc == 0, ok.text
    assert "ssh-ed25519" in known.read_text()
    assert os.stat(known).st_mode & 0o077 == 0
    assert deploy_env.run("doctor", "host", deploy_env.host).rc == 0  # now known: strict mode passes


def test_changed_host_key_is_refused(deploy_env: DeployEnv, tmp_path: Path) -> None:
    real = Path(deploy_env.sim.known_hosts).read_text().split()
    other = tmp_path / "other_key"
    assert os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other}") == 0
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{real[0]} {(other.with_suffix('.pub')).read_text().split()[0]} "
                      f"{(other.with_suffix('.pub')).read_text().split()[1]}\n")
    _point_known_hosts(deploy_env, forged)
    res = deploy_env.run("--json", "doctor", "host", deploy_env.host, "--tofu")
    assert res.rc == 3
    assert "CHANGED" in res.json["what"] and "ssh-keygen" in res.json["fix"]


def test_known_hosts_markers_are_skipped_tofu_appends_and_a_revoked_key_is_refused(deploy_env: DeployEnv,
                                                                                   tmp_path: Path) -> None:
    """Issue 21 §9: `@cert-authority` / `@revoked` lines gave a paramiko InvalidHostKey traceback, and --tofu
    rewrote the whole file without its comments and the lines it could not parse."""
    real = Path(deploy_env.sim.known_hosts).read_text().split()
    ca = tmp_path / "ca_key"
    assert os.system(f"ssh-keygen -q -t ed25519 -N '' -f {ca}") == 0
    ca_pub = ca.with_suffix(".pub").read_text().split()
    known = tmp_path / "known_hosts"
    before = f"# site CA\n@cert-authority *.example.com {ca_pub[0]} {ca_pub[1]}\nnot a key line at all\n"
    known.write_text(before)
    _point_known_hosts(deploy_env, known)
    ok = deploy_env.run("--json", "doctor", "host", deploy_env.host, "--tofu")
    assert ok.rc == 0 and "Traceback" not in ok.text, ok.text
    after = known.read_text()
    assert after.startswith(before) and after[len(before):].count("\n") == 1 and real[2] in after[len(before):]
    assert deploy_env.run("doctor", "host", deploy_env.host).rc == 0  # strict mode reads it back

    known.write_text(after + f"@revoked {real[0]} {real[1]} {real[2]}\n")
    refused = deploy_env.run("--json", "doctor", "host", deploy_env.host, "--tofu")
    assert refused.rc == 3 and "Traceback" not in refused.text, refused.text
    assert "@revoked" in refused.json["what"]
