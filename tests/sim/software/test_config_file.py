"""The stand-in's `--config FILE` behaves like sglang 0.5.12.post1 / 0.5.23 (see sglang/_sim/config_file.py):
the file's options go before the command line, so the command line wins; keys are flag spellings; errors are
the real ValueErrors (exit 1 with a traceback)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from .conftest import STANDIN, Server

VERSIONS = ("0.5.12.post1", "0.5.23")


def _args(tmp_path: Path, yaml_text: str, *cli: str, version: str = "0.5.12.post1",
          name: str = "c.yaml") -> subprocess.CompletedProcess[str]:
    """prepare_server_args(cli) through the stand-in's public API; prints the merged namespace as key=value."""
    cfg = tmp_path / name
    cfg.write_text(yaml_text)
    argv = [a.replace("CFG", str(cfg)) for a in cli]
    code = ("import sys, json; from sglang.srt.server_args import prepare_server_args; "
            f"a = prepare_server_args({argv!r}); "
            "print(json.dumps({k: v for k, v in vars(a).items() if k in sys.argv[1:]}, sort_keys=True))")
    keys = ["api_key", "port", "max_running_requests", "enable_metrics", "trust_remote_code", "model_path"]
    return subprocess.run([sys.executable, "-c", code, *keys], capture_output=True, text=True, timeout=30,
                          env={"PYTHONPATH": str(STANDIN), "SGLANG_SIM_VERSION": version, "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("version", VERSIONS)
def test_file_supplies_options_and_the_command_line_wins(tmp_path: Path, version: str) -> None:
    r = _args(tmp_path, "api-key: 'k: \"x\"'\nport: 9000\nmax-running-requests: 64\nenable-metrics: true\n"
              "trust-remote-code: false\n",
              "--model-path", "m", "--port", "8000", "--config", "CFG", version=version)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ('{"api_key": "k: \\"x\\"", "enable_metrics": true, "max_running_requests": 64, '
                                '"model_path": "m", "port": 8000, "trust_remote_code": false}')


@pytest.mark.parametrize("text, cli, error", [
    ("port: 1\n", ("--config", "CFG", "--config", "CFG"), "Multiple config files specified! Only one allowed."),
    ("port: 1\n", ("--config",), "No config file specified after --config flag!"),
    ("- a\n", ("--config", "CFG"), "Config file must contain a dictionary at root level"),
    ("api_key: x\n", ("--config", "CFG"), "unrecognized arguments: --api_key x"),  # keys are flag spellings
])
def test_config_errors_are_the_real_ones(tmp_path: Path, text: str, cli: tuple[str, ...], error: str) -> None:
    r = _args(tmp_path, text, "--model-path", "m", *cli)
    assert r.returncode != 0 and error in r.stderr, r.stderr


def test_only_yaml_files_and_only_the_bare_flag(tmp_path: Path) -> None:
    r = _args(tmp_path, "port: 1\n", "--model-path", "m", "--config", "CFG", name="c.json")
    assert r.returncode == 1 and "ValueError: Config file must be YAML format, got: .json" in r.stderr
    # `--config=FILE` is not merged by sglang: the file is silently ignored (why the unit writes two words).
    r = _args(tmp_path, "api-key: from-file\n", "--model-path", "m", "--config=CFG")
    assert r.returncode == 0 and '"api_key": null' in r.stdout


def test_server_reads_its_key_from_the_file(tmp_path: Path, start_server: Callable[..., Server]) -> None:
    cfg = tmp_path / "secrets.yaml"
    cfg.write_text('api-key: "s3cret-from-file"\n')
    srv = start_server(None, "--config", str(cfg), start_s=0.2)
    assert srv.wait_status(200)[-1] == 200  # /health needs no key (sglang's probes are exempt): ready
    assert requests.get(srv.url + "/v1/models", timeout=5).status_code == 401
    ok = requests.get(srv.url + "/v1/models", headers={"Authorization": "Bearer s3cret-from-file"}, timeout=5)
    assert ok.status_code == 200
    assert "s3cret-from-file" not in " ".join(srv.proc.args)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_logging_config_keeps_the_key_out_of_the_log(tmp_path: Path, version: str,
                                                              start_server: Callable[..., Server],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.flags import FlagSchema, canonicalize
    from orchestrator.inventory.models import ServerProfile
    from orchestrator.render.service import render_logging

    prof = ServerProfile.model_validate({"model_path": "/models/m", "served_model_name": "m",
                                         "api_key": {"env": "K"}, "sglang_version": version, "flags": {}})
    conf = render_logging(prof, canonicalize({}, FlagSchema.load(version)))
    assert conf is not None
    path = tmp_path / "logging.json"
    path.write_text(conf.content)
    cfg = tmp_path / "secrets.yaml"
    cfg.write_text('api-key: "s3cret-not-in-the-log"\n')
    # Without the logging config the stand-in logs its arguments, key included, like the real releases ...
    plain = start_server(None, "--config", str(cfg), start_s=0.2, version=version)
    assert plain.wait_status(200)[-1] == 200  # ready (a 401 never comes: /health needs no key)
    assert "s3cret-not-in-the-log" in plain.output() and "server_args=" in plain.output()
    # ... with it (SGLANG_LOGGING_CONFIG_PATH) that line is gone, the rest of the log is still there.
    monkeypatch.setenv("SGLANG_LOGGING_CONFIG_PATH", str(path))
    srv = start_server(None, "--config", str(cfg), start_s=0.2, version=version)
    assert srv.wait_status(200)[-1] == 200
    time.sleep(0.3)
    out = srv.output()
    assert "s3cret-not-in-the-log" not in out and "server_args=" not in out
    assert "The server is fired up and ready to roll!" in out and "Load weight end." in out


def test_missing_logging_config_fails_like_sglang(tmp_path: Path, start_server: Callable[..., Server],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_LOGGING_CONFIG_PATH", str(tmp_path / "absent.json"))
    srv = start_server(None, start_s=0.2)
    assert srv.proc.wait(15) == 1
    assert "Setting SGLANG_LOGGING_CONFIG_PATH from env with" in srv.output()
