"""The PVE API over TLS (issue 21 §12): `verify: false` warns once per host; a certificate this machine does not
trust is reported as a certificate failure with the fix (copy the cluster CA), not as "unreachable".

A real HTTPS server on loopback with a self-signed certificate stands in for the node.
"""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import RemoteError
from orchestrator.inventory.models import Host, Inventory
from orchestrator.remote import pve
from orchestrator.remote.pve import HttpsPve
from orchestrator.runlog import Metrics


class _Version(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"data": {"version": "9.1.3"}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def https_port(tmp_path: Path) -> Iterator[int]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=pve-gpu-1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Version)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()


def api_host(inventory: Inventory, port: int, verify: bool) -> Host:
    host = inventory.hosts["pve-gpu-1"]
    assert host.pve.api is not None
    api = host.pve.api.model_copy(update={"port": port, "verify": verify, "timeout_s": 5.0})
    return host.model_copy(update={"address": "127.0.0.1", "example": False,
                                   "pve": host.pve.model_copy(update={"api": api})})


@pytest.fixture
def inventory(inv: Path, monkeypatch: pytest.MonkeyPatch) -> Inventory:
    from orchestrator.inventory.loader import load_inventory

    monkeypatch.setenv("DEPLOY_PVE_TOKEN_SECRET", "00000000-1111-2222-3333-444444444444")
    monkeypatch.setattr(pve, "_warned_unverified", set(), raising=False)
    return load_inventory(inv)


def test_an_untrusted_certificate_is_reported_as_such_with_the_fix(inventory: Inventory, https_port: int) -> None:
    client = HttpsPve(api_host(inventory, https_port, verify=True), Metrics())
    with pytest.raises(RemoteError) as failed:
        client.call("get", "/version")
    assert "TLS certificate failed verification" in failed.value.what and "unreachable" not in failed.value.what
    assert "/etc/pve/pve-root-ca.pem" in failed.value.fix and failed.value.details["cause"] == "certificate"


def test_verify_false_warns_once_per_host(inventory: Inventory, https_port: int,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    host = api_host(inventory, https_port, verify=False)
    assert HttpsPve(host, Metrics()).call("get", "/version") == {"version": "9.1.3"}
    HttpsPve(host, Metrics())
    err = capsys.readouterr().err
    assert err.count("pve.api.verify is false") == 1 and "pve-root-ca.pem" in err
