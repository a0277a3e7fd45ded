"""The redactor: secrets by key name, by registered value, and by textual shape; ordinary text stays intact."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.redact import (
    REDACTED,
    SECRET_JSON_SED,
    RedactingStream,
    forget_secrets,
    is_secret_key,
    redact,
    redact_text,
    register_secret,
)

KEY = "sk-3f9a1c0e7b2d4a6f"


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


@pytest.mark.parametrize("key", ["api_key", "admin_api_key", "--api-key", "API-KEY", "token", "hf_token",
                                 "token_secret", "password", "db_password", "secret", "Authorization",
                                 "private_key", "apikey"])
def test_secret_key_names(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["tokens", "max_total_num_tokens", "tokenizer_path", "token_id", "total_output_tokens",
                                 "tokens_per_s_per_w", "keep_releases", "key", "monkey", "secretary"])
def test_ordinary_key_names(key: str) -> None:
    assert not is_secret_key(key)


def test_dicts_are_redacted_recursively_by_key() -> None:
    info = {"model_path": "/models/glm", "api_key": KEY, "admin_api_key": None, "max_total_num_tokens": 314304,
            "nested": [{"token_secret": "abc"}, {"tokenizer_path": "x"}], "pair": ("a", {"password": "pw"}),
            "j_per_output_token": 0.42}
    out = redact(info)
    assert out["api_key"] == REDACTED and out["admin_api_key"] is None  # unset stays visibly unset
    assert out["max_total_num_tokens"] == 314304 and out["model_path"] == "/models/glm"
    assert out["nested"] == [{"token_secret": REDACTED}, {"tokenizer_path": "x"}]
    assert out["pair"] == ("a", {"password": REDACTED})
    assert out["j_per_output_token"] == 0.42  # a figure, not a secret
    assert info["api_key"] == KEY  # a copy, the input is untouched


def test_registered_values_are_replaced_anywhere() -> None:
    register_secret(KEY)
    register_secret("abc")  # too short to replace by value
    assert redact_text(f"curl -H 'x: {KEY}' ... {KEY}.") == f"curl -H 'x: {REDACTED}' ... {REDACTED}."
    assert redact({"note": f"the key is {KEY}", "n": [KEY]}) == {"note": f"the key is {REDACTED}", "n": [REDACTED]}
    assert redact_text("abc stays") == "abc stays"


@pytest.mark.parametrize("text, expected", [
    # sglang 0.5.12.post1 logs its ServerArgs repr, 0.5.23 a dict
    (f"server_args=ServerArgs(model_path='/m', api_key='{KEY}', admin_api_key=None, port=8000)",
     f"server_args=ServerArgs(model_path='/m', api_key='{REDACTED}', admin_api_key=None, port=8000)"),
    (f"server_args={{'api_key': '{KEY}', 'tokenizer_path': '/m'}}",
     f"server_args={{'api_key': '{REDACTED}', 'tokenizer_path': '/m'}}"),
    (f'{{"api_key": "{KEY}", "max_total_num_tokens": 5}}', f'{{"api_key": "{REDACTED}", "max_total_num_tokens": 5}}'),
    (f"python -m sglang.launch_server --api-key {KEY} --port 8000",
     f"python -m sglang.launch_server --api-key {REDACTED} --port 8000"),
    (f"--api-key={KEY}", f"--api-key={REDACTED}"),
    (f"SGLANG_API_KEY={KEY}", f"SGLANG_API_KEY={REDACTED}"),
    (f'SGLANG_API_KEY="{KEY}"', f'SGLANG_API_KEY="{REDACTED}"'),
    (f"api_key={KEY}, port=1", f"api_key={REDACTED}, port=1"),
    (f"api-key: {KEY}\nport: 8000\n", f"api-key: {REDACTED}\nport: 8000\n"),
    (f"Authorization: Bearer {KEY}", f"Authorization: {REDACTED}"),
    (f"curl -H 'Authorization: Bearer {KEY}' url", f"curl -H 'Authorization: Bearer {REDACTED}' url"),
    ("PVEAPIToken=root@pam!deploy=0f0e-11aa", f"PVEAPIToken={REDACTED}"),
    (f"  api_key: {KEY}  # from the vault", f"  api_key: {REDACTED}  # from the vault"),
])
def test_secret_shapes_in_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected  # idempotent


@pytest.mark.parametrize("text", [
    "server_args=ServerArgs(api_key=None, max_total_num_tokens=314304, tokenizer_path='/m')",
    '{"output_throughput": 4455.1, "total_output_tokens": 16384, "token_id": "root@pam!deploy"}',
    "--max-running-requests 2048 --num-continuous-decode-steps 8",
    "The server is fired up and ready to roll!",
])
def test_ordinary_text_is_untouched(text: str) -> None:
    assert redact_text(text) == text


def test_json_text_keeps_parsing_after_redaction() -> None:
    doc = json.dumps({"journal": [f"server_args=ServerArgs(api_key='{KEY}')"], "api_key": KEY})
    out = json.loads(redact_text(doc))
    assert KEY not in json.dumps(out) and out["api_key"] == REDACTED


def test_stream_redacts_what_is_written() -> None:
    register_secret(KEY)
    sink = io.StringIO()
    stream = RedactingStream(sink)
    stream.write(f"journal: api_key='{KEY}'\n")
    stream.writelines([f"{KEY}\n"])
    stream.flush()
    assert KEY not in sink.getvalue() and sink.getvalue().count(REDACTED) == 2


def test_cli_json_document_is_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.ui.output import Output

    register_secret(KEY)
    Output(as_json=True).emit({"ok": False, "details": {"journal": [f"server_args=ServerArgs(api_key='{KEY}')"]},
                               "runs": [{"bench": {"server_info": {"api_key": KEY, "tp_size": 8}}}],
                               "note": f"key {KEY}"})
    out = capsys.readouterr().out
    assert KEY not in out
    doc = json.loads(out)
    assert doc["runs"][0]["bench"]["server_info"] == {"api_key": REDACTED, "tp_size": 8}
    assert doc["details"]["journal"] == [f"server_args=ServerArgs(api_key='{REDACTED}')"]


def test_the_sed_rule_for_target_files_redacts_exactly_the_keys_that_name_a_secret(tmp_path: Path) -> None:
    """Issue 38 item 8: bench_serving's JSONL (written in the container, not by the tool) embeds /server_info with
    the API keys. scripts/bench_group.sh.j2 runs SECRET_JSON_SED over it: the same keys as is_secret_key, every
    other value untouched, still one JSON object a line (real GNU sed)."""
    keys = ["api_key", "admin_api_key", "hf_token", "token_secret", "ssl_keyfile_password", "bos_token",
            "tokenizer_path", "max_total_num_tokens", "token_id", "num_tokens", "model_path", "served_model_name"]
    info = {k: f"v-{k}-\"q\"\\x" for k in keys}
    info["none_token"] = None
    line = json.dumps({"server_info": info, "output_throughput": 1.5})
    path = tmp_path / "bench.jsonl"
    path.write_text(line + "\n" + line + "\n")
    subprocess.run(["sed", "-E", "-i", SECRET_JSON_SED, str(path)], check=True)
    rows = [json.loads(r) for r in path.read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        got = row["server_info"]
        for k in keys:
            assert got[k] == (REDACTED if is_secret_key(k) else info[k]), k
        assert got["none_token"] is None and row["output_throughput"] == 1.5


@pytest.mark.parametrize("bench_rc", [0, 1])
def test_the_bench_script_leaves_no_secret_in_the_jsonl_of_a_good_or_a_failed_run(tmp_path: Path,
                                                                                  bench_rc: int) -> None:
    """Issue 38 item 8, the real script (scripts/bench_group.sh.j2 under bash): bench_serving's record embeds
    /server_info with both keys; the stored file (or a failed run's partial one, read once more) holds neither,
    and is 0600."""
    from orchestrator.bench.run import partial_name
    from orchestrator.scripts import render_script

    record = {"server_info": {"api_key": "sk-live-0123456789", "admin_api_key": "adm-0123456789", "tp_size": 8},
              "completed": 3, "output_throughput": 1.5}
    out_file = tmp_path / "rel" / "bench-quick--r-1.jsonl"
    tmp_file = Path(partial_name(str(out_file)))
    fake_bench = (f"printf '%s\\n' {shlex.quote(json.dumps(record))} >> {shlex.quote(str(tmp_file))}; "
                  f"(exit {bench_rc})")
    script = render_script("bench_group.sh.j2", runs_dir=str(tmp_path / "runs"), out_dir=str(out_file.parent),
                           pidfile=str(tmp_path / "runs" / "bench-r-1.pid"), run_id="r-1",
                           env_path=str(tmp_path / "none.env"), out_file=str(out_file), tmp_file=str(tmp_file),
                           secret_sed=SECRET_JSON_SED, bench_command=fake_bench)
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == bench_rc, proc.stderr
    kept = out_file if bench_rc == 0 else tmp_file
    assert [p.name for p in out_file.parent.iterdir()] == [kept.name]  # a failed run's file keeps its temp name
    text = kept.read_text()
    assert "0123456789" not in text and json.loads(text)["server_info"] == {
        "api_key": REDACTED, "admin_api_key": REDACTED, "tp_size": 8}
    assert kept.stat().st_mode & 0o777 == 0o600
