"""Renderers and templates: passthrough lines from the real H200 capture, the unit's ExecStart as systemd parses it,
the env file as systemd and a shell read it, hashes that ignore the managed header."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import ServerProfile
from orchestrator.parsers.devices import parse_dev_listing, parse_proc_devices
from orchestrator.render import (
    body_sha256,
    launch_argv,
    render_bundle,
    render_env,
    render_logging,
    render_passthrough,
    render_secrets,
    render_unit,
    resolve_method,
)
from orchestrator.render.service import SECRETS_PATH
from tests.shared import EXAMPLE_INVENTORY, H200_NVLINK

ROOT = Path(__file__).resolve().parents[3]
FIX = H200_NVLINK
H200_LS = (FIX / "ls-dev-nvidia.txt").read_text()
H200_PROC = (FIX / "proc-devices.txt").read_text()

# 8 GPUs whose minor numbers are not their indices, with modeset (as on the ASUS box); no caps.
RTX8_LS = "\n".join(
    [f"crw-rw-rw- 1 root root 195, {m:3d} Apr  8 10:00 /dev/nvidia{m}" for m in (2, 3, 0, 1, 6, 7, 4, 5)]
    + ["crw-rw-rw- 1 root root 195, 255 Apr  8 10:00 /dev/nvidiactl",
       "crw-rw-rw- 1 root root 195, 254 Apr  8 10:00 /dev/nvidia-modeset",
       "crw-rw-rw- 1 root root 511,   0 Apr  8 10:00 /dev/nvidia-uvm",
       "crw-rw-rw- 1 root root 511,   1 Apr  8 10:00 /dev/nvidia-uvm-tools"]) + "\n"


# ------------------------------------------------------------------------------------- systemd reference rules
def systemd_exec_words(unit: str, env: dict[str, str]) -> list[str]:
    """ExecStart= as systemd reads it: join `\\` continuations, resolve `%%`, split words honouring quotes and
    C escapes, then substitute `$$` and `${VAR}` (a whole-word `${VAR}` stays one word)."""
    lines = unit.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ExecStart="))
    value = lines[start][len("ExecStart="):]
    i = start
    while value.endswith("\\"):
        i += 1
        value = value[:-1] + " " + lines[i]
    assert "%" not in value.replace("%%", ""), "unexpected specifier"
    value = value.replace("%%", "%")
    words: list[str] = []
    cur: list[str] = []
    in_word = False
    quote = ""
    j = 0
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", ";": ";", " ": " "}
    while j < len(value):
        c = value[j]
        if c == "\\":
            nxt = value[j + 1]
            cur.append(escapes[nxt])
            in_word = True
            j += 2
            continue
        if quote:
            if c == quote:
                quote = ""
            else:
                cur.append(c)
        elif c in "\"'":
            quote = c
            in_word = True
        elif c in " \t":
            if in_word:
                words.append("".join(cur))
                cur, in_word = [], False
        else:
            cur.append(c)
            in_word = True
        j += 1
    assert not quote, "unbalanced quotes"
    if in_word:
        words.append("".join(cur))
    out = []
    for w in words:
        if w.startswith("${") and w.endswith("}") and w.count("$") == 1:
            out.append(env.get(w[2:-1], ""))
        else:
            assert "$" not in w.replace("$$", ""), f"unexpected variable in {w!r}"
            out.append(w.replace("$$", "$"))
    return out


def systemd_env_file(text: str) -> dict[str, str]:
    """EnvironmentFile= lines of the form KEY="..." (the form the template writes)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, raw = line.partition("=")
        assert raw.startswith('"') and raw.endswith('"'), line
        body, val, k = raw[1:-1], [], 0
        while k < len(body):
            if body[k] == "\\":
                assert body[k + 1] in '\\"$`', body
                val.append(body[k + 1])
                k += 2
            else:
                assert body[k] not in '"', body
                val.append(body[k])
                k += 1
        out[key] = "".join(val)
    return out


def profile(**over: object) -> ServerProfile:
    base: dict[str, object] = {"model_path": "/models/GLM-5-NVFP4", "served_model_name": "glm-5",
                               "sglang_version": "0.5.12.post1", "flags": {"tp": 8, "trust-remote-code": True}}
    base.update(over)
    return ServerProfile.model_validate(base)


OLD = FlagSchema.load("0.5.12.post1")


# ------------------------------------------------------------------------------------- passthrough
def test_devn_lines_from_real_h200_listing() -> None:
    nodes = parse_dev_listing(H200_LS)
    f = render_passthrough(nodes, {}, parse_proc_devices(H200_PROC), "devN", vmid=120)
    assert f.content == (
        "dev0: /dev/nvidia0,mode=0666\n"
        "dev1: /dev/nvidia1,mode=0666\n"
        "dev2: /dev/nvidiactl,mode=0666\n"
        "dev3: /dev/nvidia-uvm,mode=0666\n"
        "dev4: /dev/nvidia-uvm-tools,mode=0666\n"
        "dev5: /dev/nvidia-caps/nvidia-cap1,mode=0666\n"
        "dev6: /dev/nvidia-caps/nvidia-cap2,mode=0666\n"
    )
    assert f.remote_path == "/etc/pve/lxc/120.conf"


def test_devn_order_start_index_skips_and_options() -> None:
    nodes = parse_dev_listing(RTX8_LS)
    existing = {"dev1": "/dev/dri/card0,gid=44", "dev4": "/dev/nvidia3,mode=0666", "dev12": "/dev/ttyUSB0",
                "arch": "amd64"}
    f = render_passthrough(nodes, existing, {}, "devN", start_index=1, uid=0, gid=44)
    keys = [ln.split(":")[0] for ln in f.content.splitlines()]
    paths = [ln.split(" ")[1].split(",")[0] for ln in f.content.splitlines()]
    assert paths == [f"/dev/nvidia{i}" for i in range(8)] + [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    # dev1 (dri) and dev12 (tty) are kept; dev4 was an old NVIDIA entry and is reused
    assert keys == ["dev2", "dev3", "dev4", "dev5", "dev6", "dev7", "dev8", "dev9", "dev10", "dev11",
                    "dev13", "dev14"]
    assert all(ln.endswith(",mode=0666,uid=0,gid=44") for ln in f.content.splitlines())
    # re-rendering with its own output in the config gives the same lines (idempotent)
    again_conf = dict(existing)
    again_conf.update({ln.split(": ")[0]: ln.split(": ")[1] for ln in f.content.splitlines()})
    assert render_passthrough(nodes, again_conf, {}, "devN", start_index=1, uid=0, gid=44).content == f.content


def test_missing_uvm_is_refused() -> None:
    nodes = parse_dev_listing("\n".join(ln for ln in RTX8_LS.splitlines() if "uvm" not in ln))
    with pytest.raises(ConfigError) as exc:
        render_passthrough(nodes, {}, {"nvidia": 195}, "devN")
    assert "/dev/nvidia-uvm" in exc.value.what and "nvidia-modprobe" in exc.value.fix


def test_raw_lxc_lines_use_proc_devices_majors() -> None:
    f = render_passthrough(parse_dev_listing(H200_LS), {}, parse_proc_devices(H200_PROC), "raw-lxc")
    assert f.content == (
        "lxc.cgroup2.devices.allow: c 195:* rwm\n"
        "lxc.cgroup2.devices.allow: c 238:* rwm\n"
        "lxc.cgroup2.devices.allow: c 241:* rwm\n"
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file\n"
        "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\n"
    )


def test_raw_lxc_without_caps_and_without_uvm_major() -> None:
    nodes = parse_dev_listing(RTX8_LS)
    f = render_passthrough(nodes, {}, {"nvidia": 195, "nvidia-uvm": 511, "nvidia-caps": 509}, "raw-lxc")
    assert "c 511:* rwm" in f.content and "509" not in f.content and "nvidia-caps" not in f.content
    with pytest.raises(ConfigError):
        render_passthrough(nodes, {}, {"nvidia": 195}, "raw-lxc")


def test_resolve_method() -> None:
    assert resolve_method("auto", "8.1")[0] == "devN"
    assert resolve_method("auto", "9.0.3")[0] == "devN"
    assert resolve_method("auto", "8.0")[0] == "raw-lxc"
    assert resolve_method("auto", None)[0] == "devN"
    assert resolve_method("raw-lxc", "9.0")[0] == "raw-lxc"
    with pytest.raises(ConfigError):
        resolve_method("devN", "7.4")


# ------------------------------------------------------------------------------------- unit
NASTY = {
    "json-model-override-args": '{"rope_scaling": {"type": "yarn", "factor": 2.0}, "note": "a b\'c"}',
    "chat-template": "/opt/t 50% $HOME \\x\"q\"",
    "mem-fraction-static": 0.9,
    "tp": 8,
    "trust-remote-code": True,
}


def test_unit_execstart_survives_systemd_parsing() -> None:
    prof = profile(flags=NASTY, served_model_name="glm 5 %n", model_path="/models/GLM-5 NVFP4")
    flags = canonicalize(prof.flags, OLD)
    unit = render_unit(prof, flags, release_id="r1").content
    assert systemd_exec_words(unit, {}) == launch_argv(prof, flags)


def test_api_key_goes_to_a_0600_config_file_never_to_argv(tmp_path: Path) -> None:
    prof = profile(api_key={"env": "MY_KEY"})
    flags = canonicalize(prof.flags, OLD)
    secret = 'k3y with space"$%`\\: #x \'q\' \u00e9'
    unit = render_unit(prof, flags).content
    env = render_env(prof, secret)
    conf = render_secrets(prof, secret)
    assert conf is not None and render_secrets(profile(), None) is None
    # The unit names the file (two words: sglang merges only a bare `--config`), never the key or a ${VAR} of it.
    assert secret not in unit and "${SGLANG_API_KEY}" not in unit and "--api-key" not in unit
    words = systemd_exec_words(unit, systemd_env_file(env.content))
    assert words[words.index("--config") + 1] == SECRETS_PATH == "/etc/sglang/secrets.yaml"
    assert secret not in " ".join(words) and words == launch_argv(prof, flags)
    # The file loads back as exactly the key, under the flag's own spelling, and is owner-only.
    assert conf.mode == 0o600 and conf.remote_path == SECRETS_PATH and conf.name == "secrets.yaml"
    assert yaml.safe_load(conf.content) == {"api-key": secret}
    assert secret not in conf.redacted().content and "<redacted>" in conf.redacted().content
    assert secret not in repr(conf)
    # The env file still carries it (0600) for deploy's own smoke and bench checks.
    assert systemd_env_file(env.content)["SGLANG_API_KEY"] == secret and env.mode == 0o600
    assert secret not in env.redacted().content and "<redacted>" in env.redacted().content
    # Validation before install passes a placeholder as --api-key: no file is needed on the target yet.
    assert launch_argv(prof, flags, api_key="placeholder")[-len(flags.argv()) - 2:][:2] == ["--api-key",
                                                                                         "placeholder"]
    with pytest.raises(ConfigError):
        render_secrets(prof, None)
    with pytest.raises(ConfigError):
        render_secrets(prof, "two\nlines")


def test_logging_config_quiets_the_logger_that_prints_the_key() -> None:
    import json

    prof = profile(api_key={"env": "MY_KEY"})
    unit = render_unit(prof, canonicalize(prof.flags, OLD)).content
    assert "Environment=SGLANG_LOGGING_CONFIG_PATH=/etc/sglang/logging.json" in unit
    assert "SGLANG_LOGGING_CONFIG_PATH" not in render_unit(profile(), canonicalize(prof.flags, OLD)).content
    conf = render_logging(prof, canonicalize({"log-level": "debug"}, OLD))
    assert conf is not None and conf.mode == 0o644 and conf.remote_path == "/etc/sglang/logging.json"
    cfg = json.loads(conf.content)
    assert cfg["root"]["level"] == "DEBUG" and cfg["disable_existing_loggers"] is False
    assert cfg["loggers"] == {"sglang.srt.entrypoints.engine": {"level": "WARNING"}}
    # (sglang applies it with logging.config.dictConfig: tests/sim/software/test_config_file.py runs that)
    default = render_logging(prof, canonicalize({}, OLD))
    assert default is not None and json.loads(default.content)["root"]["level"] == "INFO"
    assert render_logging(profile(), canonicalize({}, OLD)) is None


def test_unit_fields_and_determinism() -> None:
    prof = profile(start_timeout_s=600)
    flags = canonicalize(prof.flags, OLD)
    u1 = render_unit(prof, flags, release_id="r1")
    u2 = render_unit(prof, flags, release_id="r2")
    assert u1.sha256 == u2.sha256 and u1.content != u2.content  # header does not change the hash
    assert body_sha256(u1.content) == u1.sha256 == body_sha256(u2.content)
    assert "r1" in u1.content.splitlines()[1] and u1.sha256 in u1.content.splitlines()[1]
    for want in ("After=network-online.target", "Type=simple", "EnvironmentFile=/etc/sglang/sglang.env",
                 "Restart=on-failure", "RestartSec=10", "StartLimitBurst=", "StartLimitIntervalSec=",
                 "LimitMEMLOCK=infinity", "LimitNOFILE=1048576", "TimeoutStartSec=600", "TimeoutStopSec=",
                 "KillMode=mixed", "WantedBy=multi-user.target"):
        assert want in u1.content
    assert "--api-key" not in u1.content
    # a flag change changes the hash
    other = canonicalize({"tp": 4, "trust-remote-code": True}, OLD)
    assert render_unit(prof, other).sha256 != u1.sha256
    lines = u1.content.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ExecStart="))
    assert lines[start + 1].strip() == "--model-path /models/GLM-5-NVFP4 \\"
    assert all(ln.endswith(" \\") for ln in lines[start:start + 6])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_unit(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    prof = profile(flags=NASTY, venv=str(venv), api_key={"env": "K"})
    unit = tmp_path / "sglang.service"
    unit.write_text(render_unit(prof, canonicalize(prof.flags, OLD), release_id="r1").content)
    res = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    assert res.returncode == 0, res.stderr
    assert "sglang.service" not in res.stderr, res.stderr


def test_env_file_sorted_quoted_and_shell_compatible(tmp_path: Path) -> None:
    prof = profile(env={"ZED": "last", "NCCL_P2P_LEVEL": "SYS", "WEIRD": 'a "b" $c `d` \\e f'},
                   api_key={"env": "K"})
    env = render_env(prof, "s3cret")
    body = [ln for ln in env.content.splitlines() if not ln.startswith("#")]
    assert [ln.split("=")[0] for ln in body] == ["NCCL_P2P_LEVEL", "WEIRD", "ZED", "SGLANG_API_KEY"]
    assert systemd_env_file(env.content) == {"NCCL_P2P_LEVEL": "SYS", "WEIRD": 'a "b" $c `d` \\e f', "ZED": "last",
                                             "SGLANG_API_KEY": "s3cret"}
    path = tmp_path / "sglang.env"
    path.write_text(env.content)
    out = subprocess.run(["bash", "-c", f'set -a; . {path}; printf "%s" "$WEIRD"'], capture_output=True,
                         text=True, env={"PATH": os.environ.get("PATH", "")}, timeout=30)
    assert out.stdout == 'a "b" $c `d` \\e f'
    assert render_env(prof, "s3cret") == env  # deterministic
    with pytest.raises(ConfigError):
        render_env(prof, None)  # profile has api_key: the value must be given
    with pytest.raises(ValueError, match="U\\+000A"):  # the inventory refuses it ...
        profile(env={"X": "two\nlines"})
    with pytest.raises(ConfigError):  # ... and the renderer would too (model_copy skips validation)
        render_env(profile().model_copy(update={"env": {"X": "two\nlines"}}), None)


# ------------------------------------------------------------------------------------- bundle
def test_bundle_for_seed_host() -> None:
    inv = load_inventory(EXAMPLE_INVENTORY)
    host = inv.hosts["pve-gpu-1"]
    prof = inv.profile_for(host)
    kw = {"nodes": parse_dev_listing(H200_LS), "proc_devices": parse_proc_devices(H200_PROC)}
    b1 = render_bundle(host, prof, release_id="a", **kw)  # type: ignore[arg-type]
    b2 = render_bundle(host, prof, release_id="b", **kw)  # type: ignore[arg-type]
    assert [f.name for f in b1.files] == ["passthrough-devN", "sglang.service", "sglang.env"]
    assert b1.sha256 == b2.sha256
    unit = b1.file("sglang.service").content
    for want in ("--tensor-parallel-size 8", "--nsa-prefill-backend trtllm", "--nsa-decode-backend trtllm",
                 "--max-running-requests 2048", "--num-continuous-decode-steps 8"):
        assert want in unit
    no_pt = render_bundle(host, prof)
    assert [f.name for f in no_pt.files] == ["sglang.service", "sglang.env"] and no_pt.method is None
