"""The node's HTTPS API on <address>:8006 (`/api2/json/...`), like pveproxy as far as a client can tell:
API-token and ticket+CSRF auth, `{"data": ...}` envelopes, PVE's error shapes, HTTP reason = error message
(proxmoxer puts the reason into ResourceException.content).

    python -m simulator.pve.server <host_dir>
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import secrets
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from simulator.config import HostPaths
from simulator.pve import acl, api, schema
from simulator.pve.lxc import PveError

TOKEN_ID = acl.DEFAULT_TOKEN
TICKET_LIFETIME_S = 7200


class Auth:
    """Token secret and root password from the 0600 files in api/; tickets kept in memory."""

    def __init__(self, api_dir: Path, hp: HostPaths):
        self.hp = hp
        self.token_secret = (api_dir / "token-secret").read_text().strip()
        self.root_password = (api_dir / "root-password").read_text().strip()
        self.tickets: dict[str, tuple[str, float, str]] = {}  # ticket -> (user, issued, csrf)
        self.lock = threading.Lock()

    def issue(self, user: str) -> tuple[str, str]:
        now = int(time.time())
        sig = base64.b64encode(secrets.token_bytes(48)).decode()
        ticket = f"PVE:{user}:{now:08X}::{sig}"
        csrf = f"{now:08X}:{base64.b64encode(secrets.token_bytes(32)).decode().rstrip('=')}"
        with self.lock:
            self.tickets[ticket] = (user, time.time(), csrf)
        return ticket, csrf

    def ticket_user(self, ticket: str) -> tuple[str, str] | None:
        with self.lock:
            entry = self.tickets.get(ticket)
        if entry is None or time.time() - entry[1] > TICKET_LIFETIME_S:
            return None
        return entry[0], entry[2]

    def check_token(self, header: str) -> str | None:
        value = header[len("PVEAPIToken="):]
        tokenid, _, secret = value.partition("=")
        if tokenid == TOKEN_ID and hmac.compare_digest(secret, self.token_secret):
            return tokenid
        other = acl.token_secret(self.hp, tokenid) if tokenid != TOKEN_ID else None  # pveum-made tokens
        if other is not None and hmac.compare_digest(secret, other):
            return tokenid
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pve-api-daemon/3.0"
    hp: HostPaths
    auth: Auth

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} [{self.log_date_time_string()}] {format % args}\n")

    # ------------------------------------------------------------------------------------------ plumbing

    def _params(self) -> dict[str, str]:
        url = urllib.parse.urlsplit(self.path)
        pairs = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            body = self.rfile.read(length).decode()
            if "json" in (self.headers.get("Content-Type") or ""):
                data = json.loads(body or "{}")
                pairs += [(k, v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list))
                           else str(int(v)) if isinstance(v, bool) else str(v)) for k, v in data.items()]
            else:
                pairs += urllib.parse.parse_qsl(body, keep_blank_values=True)
        return dict(pairs)

    def _send(self, status: int, payload: dict[str, Any], reason: str | None = None) -> None:
        try:
            delay = self.hp.load().faults.api_delay_s
        except (OSError, ValueError):
            delay = 0.0
        if delay > 0:
            time.sleep(delay)
        body = json.dumps(payload).encode()
        msg = (reason or "").splitlines()[0][:200] if reason else None
        self.send_response(status, msg.encode("latin-1", "replace").decode("latin-1") if msg else None)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"data": None, "message": message.rstrip("\n") + "\n"}, message)

    # ------------------------------------------------------------------------------------------ requests

    def _handle(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        if not url.path.startswith("/api2/json/"):
            self._error(501, "Unsupported format or path")
            return
        path = urllib.parse.unquote(url.path[len("/api2/json"):])
        try:
            params = self._params()
        except (ValueError, UnicodeDecodeError):
            self._error(400, "unable to parse request body")
            return
        if method == "POST" and path.rstrip("/") == "/access/ticket":
            self._ticket(params)
            return
        user = self._authenticate(method)
        if user is None:
            return
        caller = api.Caller(user=user, background=True)
        try:
            data = api.handle(self.hp, method, path, params, caller)
        except schema.ParamError as exc:
            self._send(400, {"errors": exc.errors, "data": None}, "Parameter verification failed.")
            return
        except PveError as exc:
            self._error(exc.status, exc.message)
            return
        except Exception as exc:  # a simulator bug must not look like a hung API
            self._error(500, f"simulator internal error: {type(exc).__name__}: {exc}")
            raise
        self._send(200, {**caller.attrs, "data": data})

    def _authenticate(self, method: str) -> str | None:
        header = self.headers.get("Authorization") or ""
        if header.startswith("PVEAPIToken="):
            user = self.auth.check_token(header)
            if user is None:
                self._error(401, "invalid token value!")
            return user
        cookies = dict(c.strip().split("=", 1) for c in (self.headers.get("Cookie") or "").split(";")
                       if "=" in c)
        ticket = urllib.parse.unquote(cookies.get("PVEAuthCookie", ""))
        if not ticket:
            self._error(401, "No ticket")
            return None
        found = self.auth.ticket_user(ticket)
        if found is None:
            self._error(401, "invalid PVE ticket")
            return None
        user, csrf = found
        if method != "GET" and self.headers.get("CSRFPreventionToken") != csrf:
            self._error(401, "Permission denied - invalid csrf token")
            return None
        return user

    def _ticket(self, params: dict[str, str]) -> None:
        ep = schema.find("POST", "/access/ticket")
        assert ep is not None
        try:
            schema.validate(ep, params)
        except schema.ParamError as exc:
            self._send(400, {"errors": exc.errors, "data": None}, "Parameter verification failed.")
            return
        username = params["username"]
        if "@" not in username:
            username = f"{username}@{params.get('realm', 'pam')}"
        password = params["password"]
        ok = username == "root@pam" and (hmac.compare_digest(password, self.auth.root_password)
                                          or self.auth.ticket_user(password) is not None)
        if not ok:
            self._error(401, "authentication failure")
            return
        ticket, csrf = self.auth.issue(username)
        self._send(200, {"data": {"username": username, "ticket": ticket, "CSRFPreventionToken": csrf,
                                  "cap": {"vms": {}, "storage": {}, "nodes": {}, "access": {}, "dc": {},
                                          "sdn": {}, "mapping": {}}}})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def serve(hp: HostPaths) -> None:
    cfg = hp.load()
    if not cfg.address.startswith("127."):
        raise SystemExit(f"refusing to bind {cfg.address}: the simulator only uses 127.0.0.0/8")
    handler = type("BoundHandler", (Handler,), {"hp": hp, "auth": Auth(hp.api, hp)})
    httpd = ThreadingHTTPServer((cfg.address, cfg.api_port), handler)
    httpd.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(hp.api / "pve-ssl.pem", hp.api / "pve-ssl.key")
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    (hp.api / "api.pid").write_text(f"{os.getpid()}\n")
    print(f"pve api simulator for {cfg.node} on https://{cfg.address}:{cfg.api_port}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m simulator.pve.server <host_dir>")
    serve(HostPaths(Path(sys.argv[1])))
