"""Issue 50, 3a: the release's server_info.json kept the server's API keys. The real /server_info of sglang
0.5.12.post1 (tests/fixtures/sglang/server_info-0.5.12.post1.json, captured on the lent H100) has
`internal_states[…]` = the whole vars(server_args) per DP rank, `api_key`, `admin_api_key` and
`ssl_keyfile_password` included; the smoke probe redacted only top-level names ending in `api_key`. Here the shipped
probe (steps/checks.py `smoke_source`, the very text the container runs) fetches that document from a local HTTP
server, with secrets set at every depth, and stores it: no secret may remain anywhere in the file."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.redact import SECRET_JSON_SED, redact
from orchestrator.steps.checks import smoke_source

REPO = Path(__file__).resolve().parents[3]
REAL = REPO / "tests/fixtures/sglang/server_info-0.5.12.post1.json"
SECRETS = {"api_key": "sk-server-key-0123456789", "admin_api_key": "sk-admin-key-0123456789",
           "ssl_keyfile_password": "pem-pass-0123456789"}


def with_secrets() -> dict[str, Any]:
    """The real document, as a server started with an API key, an admin key and a key-file password answers."""
    doc = json.loads(REAL.read_text())
    assert set(SECRETS) <= set(doc["internal_states"][0]), "the capture's internal state lacks a secret field"
    doc.update(SECRETS)
    for rank in doc["internal_states"]:
        rank.update(SECRETS)
    doc["internal_states"].append({**doc["internal_states"][0], "nested": {"hf_token": "hf_0123456789abcdef"}})
    return doc


class Server:
    def __init__(self, info: dict[str, Any]) -> None:
        class H(http.server.BaseHTTPRequestHandler):
            def _send(self, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._send(info if self.path == "/server_info" else {"data": [{"id": "tiny"}]})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self._send({"choices": [{"message": {"content": "42"}}], "usage": {}})

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def test_the_shipped_probe_stores_the_real_server_info_with_no_secret_at_any_depth(tmp_path: Path) -> None:
    server = Server(with_secrets())
    saved = tmp_path / "server_info.json"
    args = {"base": server.url, "model": "tiny", "prompt": "17 + 25?", "max_tokens": 8, "timeout": 10,
            "server_info_path": str(saved)}
    try:
        run = subprocess.run([sys.executable, "-", json.dumps(args)], input=smoke_source(), text=True,
                             capture_output=True, timeout=60)
    finally:
        server.server.shutdown()
        server.server.server_close()
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1])["server_info_saved"] == str(saved), run.stdout
    text = saved.read_text()
    for value in [*SECRETS.values(), "hf_0123456789abcdef"]:
        assert value not in text, value  # before: every internal_states rank kept all three
    stored = json.loads(text)
    assert stored["internal_states"][0]["api_key"] == "<redacted>"
    assert stored["internal_states"][1]["nested"]["hf_token"] == "<redacted>"
    assert stored["internal_states"][0]["ssl_keyfile_password"] == "<redacted>"
    assert stored["admin_api_key"] == "<redacted>"
    assert stored["tp_size"] == 1 and stored["internal_states"][0]["memory_usage"]["token_capacity"] == 68288124


def test_every_other_stored_copy_of_it_takes_the_same_rule(tmp_path: Path) -> None:
    """The ledger (redact) and bench_serving's JSONL on the target (the same rule as a sed script)."""
    doc = with_secrets()
    assert not any(v in json.dumps(redact(doc)) for v in SECRETS.values())
    line = tmp_path / "bench.jsonl"
    line.write_text(json.dumps({"server_info": doc, "completed": 3}) + "\n")
    out = subprocess.run(["sed", "-E", SECRET_JSON_SED, str(line)], capture_output=True, text=True, check=True).stdout
    assert not any(v in out for v in SECRETS.values()) and json.loads(out)["completed"] == 3
