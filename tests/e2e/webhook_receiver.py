"""A real webhook receiver on 127.0.0.1 (http.server in a thread) for e2e tests, where deploy runs as its own process
and posts over real HTTP: every body and path it got, answering the given statuses in turn. Unit tests pass a
handler instead (tests/unit/monitoring/test_notify.py `Receiver`)."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class Receiver:
    def __init__(self, answers: list[int]) -> None:
        self.answers = answers  # status per request, the last one repeats
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                outer.paths.append(self.path)
                code = outer.answers[min(len(outer.bodies), len(outer.answers)) - 1]
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook/SECRET-path-token-123"
