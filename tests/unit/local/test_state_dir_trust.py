"""Issue 50 item 2: what deploy reads back from its state directory is trusted as if it had just computed it, so
another local user must not be able to plant it. The red team's reproduction: as `nobody`, with the state dir in a
shared /tmp folder (as the docs' examples put it), an entry of the decoded-YAML cache planted for router.yaml made
root's read-only `deploy router status` send `Authorization: Bearer <api key>` to a listener of `nobody`."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.local import yamlcache

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user owns needs root")


class Listener:
    """`nobody`'s listener: records the Authorization header of every request it gets."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append(self.headers.get("Authorization", ""))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"[]")

            def log_message(self, *args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user may write, sticky, as /tmp is (outside pytest's 0700 base, so `nobody` reaches it)."""
    base = Path(tempfile.mkdtemp(prefix="deploy-shared-"))
    base.chmod(0o755)
    folder = base / "team"
    folder.mkdir()
    folder.chmod(0o1777)
    yield folder
    subprocess.run(["rm", "-rf", str(base)], check=False)


def as_nobody(script: str, stdin: str = "") -> None:
    done = subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", script], input=stdin, text=True,
                          capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr


@root_only
def test_an_entry_nobody_planted_for_router_yaml_is_not_used_by_roots_router_status(
        shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv = tmp_path / "inv"
    inv.mkdir()
    key = tmp_path / "router.key"
    key.write_text("sk-root-only-abcdefghijklmnop1234\n")
    key.chmod(0o600)
    text = f"router:\n  url: http://127.0.0.1:9/\n  api_key: {{file: {key}}}\n"
    (inv / "router.yaml").write_text(text)
    state = shared / "deploy-state"
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(state))
    entry = yamlcache.entry_path(text)  # computable from world-readable files: the code and router.yaml's text
    listener = Listener()
    try:
        planted = {"data": {"router": {"url": listener.url, "api_key": {"file": str(key)}}}}
        as_nobody(f"mkdir -p {entry.parent} && cat > {entry}", json.dumps(planted))
        assert entry.stat().st_uid == NOBODY
        run = subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "router", "status"],
                             capture_output=True, text=True, timeout=120, cwd=REPO,
                             env={**os.environ, "DEPLOY_STATE_DIR": str(state)})
    finally:
        listener.close()
    assert listener.seen == [], listener.seen  # before: ["Bearer sk-root-only-…"]
    assert run.returncode == 2, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert f"state directory {state}: {state} belongs to uid {NOBODY}, another user" in out, out
    assert "fix: use a directory only you can write" in out and "Traceback" not in out, out


@root_only
def test_a_foreign_or_open_entry_in_roots_own_state_dir_is_not_read(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's state dir is private, but a file in it is not root's (copied in with its owner kept), is writable by
    others, or is a link: each is a miss (decoded afresh), never the planted value."""
    state = tmp_path / "state"
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(state))
    text = "router:\n  url: http://127.0.0.1:9/\n"
    entry = yamlcache.entry_path(text)
    entry.parent.mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    planted = json.dumps({"data": {"router": {"url": "http://planted"}}})
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(planted)
    elsewhere.chmod(0o600)
    for make in ("foreign", "open", "link"):
        entry.unlink(missing_ok=True)
        if make == "link":
            entry.symlink_to(elsewhere)
        else:
            entry.write_text(planted)
            entry.chmod(0o666 if make == "open" else 0o600)
            if make == "foreign":
                os.chown(entry, NOBODY, NOBODY)
        assert yamlcache.is_missing(yamlcache.lookup(text)), make
    entry.unlink()
    entry.write_text(planted)
    entry.chmod(0o600)
    assert yamlcache.lookup(text) == {"router": {"url": "http://planted"}}  # the check, not the entry, refused


def test_a_state_dir_others_can_write_is_refused_with_the_fix(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.local.files import private_state_dir
    from orchestrator.local.paths import state_dir_problem

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(state))
    state.chmod(0o700)
    assert private_state_dir() == state
    state.chmod(0o777)
    with pytest.raises(ConfigError, match="is writable by others") as err:
        private_state_dir()
    assert "DEPLOY_STATE_DIR" in (err.value.fix or "")
    state.chmod(0o700)
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)  # not sticky: anyone may rename the state dir away and put their own there
    assert "and not sticky" in (state_dir_problem(open_parent / "state") or "")
    open_parent.chmod(0o1777)
    assert state_dir_problem(open_parent / "state") is None  # not made yet: deploy makes it 0700


def test_a_state_file_is_read_without_following_a_link(tmp_path: Path) -> None:
    from orchestrator.local.files import read_private_file

    target = tmp_path / "t.json"
    target.write_text("{}")
    target.chmod(0o600)
    link = tmp_path / "watch.json"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        read_private_file(link, "watch state file")
    assert read_private_file(tmp_path / "missing.json") is None
    target.chmod(0o622)
    with pytest.raises(ConfigError, match="writable by others"):
        read_private_file(target, "watch state file")
