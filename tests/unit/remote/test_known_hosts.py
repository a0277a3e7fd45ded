"""known_hosts as OpenSSH writes it (issue 21 §9): marker lines and unreadable lines are skipped, not a paramiko
InvalidHostKey traceback; a matching `@revoked` key is refused even with --tofu; TOFU appends one line and keeps
every other line (comments, markers, what it cannot parse) as it was."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest

from orchestrator.remote.ssh import _HostKeyPolicy, load_known_hosts


def key() -> paramiko.PKey:
    return paramiko.ECDSAKey.generate()


def line(host: str, k: paramiko.PKey) -> str:
    return f"{host} {k.get_name()} {k.get_base64()}"


@pytest.fixture
def keys() -> dict[str, paramiko.PKey]:
    return {"known": key(), "revoked": key(), "ca": key(), "new": key()}


def write(path: Path, keys: dict[str, paramiko.PKey]) -> str:
    text = ("# the site's known hosts\n"
            f"@cert-authority *.example.com {keys['ca'].get_name()} {keys['ca'].get_base64()}\n"
            f"@revoked\t[127.0.0.9]:2222 {keys['revoked'].get_name()} {keys['revoked'].get_base64()}\n"
            f"{line('[127.0.0.9]:2222', keys['revoked'])}\n"
            "garbage line that is no key\n"
            f"{line('pve-a', keys['known'])}\n")
    path.write_text(text)
    return text


def test_markers_and_unreadable_lines_are_skipped_and_revoked_keys_kept_apart(tmp_path: Path, keys) -> None:
    path = tmp_path / "known_hosts"
    write(path, keys)
    into = paramiko.HostKeys()
    known = load_known_hosts(path, into)
    assert known.skipped == 2  # the @cert-authority line and the garbage line
    assert [r.asbytes() for r in known.revoked] == [keys["revoked"].asbytes()]
    assert into.lookup("pve-a") is not None
    assert into.lookup("[127.0.0.9]:2222") is None  # a revoked key is no known key, even on its own line


def test_a_revoked_key_is_refused_even_with_tofu(tmp_path: Path, keys) -> None:
    path = tmp_path / "known_hosts"
    before = write(path, keys)
    policy = _HostKeyPolicy(load_known_hosts(path, paramiko.HostKeys()), tofu=True)
    with pytest.raises(paramiko.SSHException, match="revoked host key"):
        policy.missing_host_key(paramiko.SSHClient(), "[127.0.0.9]:2222", keys["revoked"])
    assert path.read_text() == before


def test_tofu_appends_one_line_and_keeps_the_rest(tmp_path: Path, keys) -> None:
    path = tmp_path / "known_hosts"
    before = write(path, keys)
    client = paramiko.SSHClient()
    policy = _HostKeyPolicy(load_known_hosts(path, client.get_host_keys()), tofu=True)
    policy.missing_host_key(client, "[127.0.0.7]:2222", keys["new"])
    assert path.read_text() == before + line("[127.0.0.7]:2222", keys["new"]) + "\n"
    with pytest.raises(paramiko.SSHException, match="unknown host key"):
        _HostKeyPolicy(load_known_hosts(path, paramiko.HostKeys()), tofu=False).missing_host_key(
            paramiko.SSHClient(), "[127.0.0.8]:2222", key())


def test_tofu_creates_a_missing_file_0600(tmp_path: Path, keys) -> None:
    path = tmp_path / "ssh" / "known_hosts"
    client = paramiko.SSHClient()
    _HostKeyPolicy(load_known_hosts(path, client.get_host_keys()), tofu=True).missing_host_key(
        client, "pve-b", keys["new"])
    assert path.read_text() == line("pve-b", keys["new"]) + "\n" and path.stat().st_mode & 0o077 == 0
