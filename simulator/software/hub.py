"""A model hub stand-in: what `hf download REPO --local-dir DIR` (huggingface_hub 1.x) needs, on a local address.

Why: the tool fetches weights in a real container with the real `hf` CLI. This server answers the calls that
client makes (checked against huggingface_hub's snapshot_download / file_download / hf_api sources):
- `GET /api/models/{repo}[/revision/{rev}]`: model info with `sha` and `siblings` (older 1.x list files here);
- `GET /api/models/{repo}/tree/{rev}?recursive=…`: the file listing newer 1.x releases read (no Link header,
  so one page);
- `HEAD|GET /{repo}/resolve/{rev}/{file}`: 200 with `X-Repo-Commit`, `ETag` (git blob id) and `Content-Length`;
  LFS files (the safetensors shards) add `X-Linked-Etag` (sha256) and `X-Linked-Size`. The real Hub redirects
  LFS files to a CDN host; the client follows redirects on the same host itself and stops at other hosts, and
  a sim host has one address, so the stand-in serves them in place (what the client sees after following);
- bodies honour `Range: bytes=N-[M]` (206 + Content-Range), so an interrupted download resumes.
Errors carry `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) which the client maps
to its exceptions.

A gated repo (GATED_REPO_ID, the same files) answers as the real Hub does for a model whose licence must be
accepted: its model info is public (`gated: "manual"`), its file tree and files are not: 401 GatedRepo without a
token, 403 GatedRepo with a token of an account that was not granted access (any `hf_…` token not in the host's
0600 `hub-tokens` file, one token a line: `grant_token`), 401 "Invalid credentials in Authorization header" for
a string that is no token at all.

Xet (simulator/software/xet.py), as the real Hub serves every LFS file now: `/resolve` of an LFS file adds
`X-Xet-Hash` and a `Link: <…/xet-read-token/{commit}>; rel="xet-auth"`, the tree its `xetHash`; the token
endpoint `/api/models/{repo}/xet-read-token/{rev}` (gated like the files) gives the CAS URL, a short-lived
access token and its expiry; the CAS under `/xet/cas` answers `/v2` and `/v1` reconstructions with the token as
Bearer (401 without a live one) and the xorbs under `/xet/xorbs` are fetched by byte range. A client with
`hf_xet` (huggingface_hub installs it on x86_64) takes that path; one without it, or with HF_HUB_DISABLE_XET=1,
falls back to the plain body of `/resolve`, as the real client does. `xet=False` serves no Xet headers at all.

`rate_bytes_s` slows bodies down; `drop_after_bytes` cuts the first transfer of each LFS file (the plain client
then resumes it with a Range request) and the first fetch of each xorb (hf_xet fetches that range again); the host
fault `hub_cut_after_bytes` cuts every LFS transfer, plain or xorb, once that many body bytes went out (a link that
went down: the client gives up after its retries, and what it leaves on disk is what a cut real download leaves);
`requests` records what was asked (method, path, Range).

Resume, as huggingface_hub really does it: within one `hf download`, a transfer cut by the network is resumed
with `Range` from the last 10 MB piece written. Since 1.18 (PR #4306) each process downloads into its own
temporary file and deletes it on failure, so a killed `hf download` starts interrupted files again from zero.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from simulator.software.xet import RangeNotSatisfiable, Xorb, reconstruction, xet_hash

REPO_ID = "lukealonso/GLM-5-NVFP4"  # the repo the example profile (orchestrator/examples/inventory) names
#: The same files behind the Hub's gate: a token of a granted account is needed for its tree and files.
GATED_REPO_ID = "lukealonso/GLM-5-NVFP4-gated"
HUB_FILE = "hub.json"  # in the host dir: where this host's hub listens
TOKENS_FILE = "hub-tokens"  # in the host dir (0600): the tokens of accounts granted access to the gated repos
CHUNK = 64 * 1024
#: The model's config.json: enough for the server's config checks and the tool's probes (no weights).
MODEL_CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "max_position_embeddings": 202752,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}


@dataclass(frozen=True)
class RepoFile:
    path: str
    data: bytes
    lfs: bool

    @cached_property
    def git_oid(self) -> str:
        """Git blob id: the ETag the Hub gives regular files."""
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @cached_property
    def xet_hash(self) -> str:
        return xet_hash(self.data)

    @cached_property
    def xorb(self) -> Xorb:
        return Xorb(self.data)


def _safetensors(name: str, size: int) -> bytes:
    """A valid safetensors file with one U8 tensor of deterministic bytes (`size` bytes of payload)."""
    header = json.dumps({name: {"dtype": "U8", "shape": [size], "data_offsets": [0, size]},
                         "__metadata__": {"format": "pt"}}).encode()
    header += b" " * (-len(header) % 8)
    seed = hashlib.sha256(name.encode()).digest()
    body = (seed * (size // len(seed) + 1))[:size]
    return struct.pack("<Q", len(header)) + header + body


def glm5_repo(shard_bytes: int = 1 << 20, shards: int = 4) -> dict[str, RepoFile]:
    """A small GLM-5-NVFP4-like repo: the config the server stand-in accepts, tokenizer files, a few shards."""
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    index = {"metadata": {"total_size": shard_bytes * shards},
             "weight_map": {f"model.layers.{n}.mlp.experts.weight": names[n % shards] for n in range(8)}}
    small = {
        "config.json": json.dumps(MODEL_CONFIG, indent=2) + "\n",
        "generation_config.json": json.dumps({"do_sample": True, "temperature": 1.0, "top_p": 0.95}) + "\n",
        "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n",
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0}}}) + "\n",
        "model.safetensors.index.json": json.dumps(index, indent=2) + "\n",
        "README.md": "# GLM-5-NVFP4 (deploy simulator stand-in)\n",
    }
    files = {p: RepoFile(p, text.encode(), False) for p, text in small.items()}
    files.update({n: RepoFile(n, _safetensors(f"shard{i}", shard_bytes), True) for i, n in enumerate(names)})
    return files


def commit_of(files: dict[str, RepoFile]) -> str:
    h = hashlib.sha1()
    for p in sorted(files):
        h.update(p.encode() + b"\0" + files[p].git_oid.encode())
    return h.hexdigest()


@dataclass
class HubState:
    """What the server serves, and what it saw."""

    repos: dict[str, dict[str, RepoFile]]
    rate_bytes_s: float | None = None
    #: Fault knob: the first plain GET of each LFS file is cut after this many body bytes (a dropped connection).
    drop_after_bytes: int | None = None
    dropped: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, Range header or "")
    #: Repos behind the gate (their tree and files need a granted token).
    gated: set[str] = field(default_factory=set)
    #: Fault knob `hub_cut_after_bytes` (the host's faults in host.json when `host_dir` is set, else set here): LFS
    #: file bodies (what the real Hub serves from its CDN) stop after this many bytes in all, counted from when the
    #: knob took its value; from then on every such transfer is cut at once, as a link that went down (`hf
    #: download` retries 5 times, then fails). The small files still come.
    cut_after_bytes: int | None = None
    cut_served: int = 0
    host_dir: Path | None = None
    #: LFS files are served through Xet (the real Hub's way); False: plain HTTP only, as the Hub before Xet.
    xet: bool = True
    #: How long an access token of the Xet token endpoint lives (the real Hub's are short-lived).
    xet_token_ttl_s: float = 3600.0
    xet_tokens: dict[str, float] = field(default_factory=dict)  # access token -> its expiry (unix seconds)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def commit(self, repo: str) -> str:
        return commit_of(self.repos[repo])

    def xet_file(self, file_hash: str) -> RepoFile | None:
        """The LFS file whose Xet hash is `file_hash` (None: the CAS does not know it)."""
        return next((f for files in self.repos.values() for f in files.values()
                     if f.lfs and f.xet_hash == file_hash), None)

    def xorb(self, xorb_hash: str) -> Xorb | None:
        return next((f.xorb for files in self.repos.values() for f in files.values()
                     if f.lfs and f.xorb.hash == xorb_hash), None)

    def issue_xet_token(self) -> tuple[str, int]:
        """A new access token for the CAS and its expiry (unix seconds)."""
        token = "xet_" + os.urandom(16).hex()
        expiry = time.time() + self.xet_token_ttl_s
        with self.lock:
            now = time.time()  # expired tokens are forgotten: a hub that runs for days issues one per file
            self.xet_tokens = {t: e for t, e in self.xet_tokens.items() if e > now}
            self.xet_tokens[token] = expiry
        return token, int(expiry)

    def xet_token_live(self, token: str) -> bool:
        with self.lock:
            return self.xet_tokens.get(token, 0.0) > time.time()

    def granted(self) -> set[str]:
        """The tokens of accounts granted access (read on every request: a test grants one while the hub runs)."""
        if self.host_dir is None:
            return set()
        try:
            return {t.strip() for t in (self.host_dir / TOKENS_FILE).read_text().splitlines() if t.strip()}
        except OSError:
            return set()

    def take_budget(self, want: int) -> int:
        """How many of the next `want` body bytes may go out before the cut (`want` when no cut is set)."""
        with self.lock:
            if self.host_dir is not None:
                try:
                    faults = json.loads((self.host_dir / "host.json").read_text()).get("faults") or {}
                except (OSError, ValueError):
                    faults = {}
                knob = faults.get("hub_cut_after_bytes")
                if knob != self.cut_after_bytes:
                    self.cut_after_bytes, self.cut_served = knob, 0
            if self.cut_after_bytes is None:
                return want
            allowed = max(0, min(want, self.cut_after_bytes - self.cut_served))
            self.cut_served += allowed
            return allowed


class _Handler(BaseHTTPRequestHandler):
    server: HubHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _headers(self, code: int, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()

    def _json(self, code: int, obj: object, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self._headers(code, {"Content-Type": "application/json", "Content-Length": str(len(body)), **(extra or {})})
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, error_code: str, message: str, commit: str | None = None) -> None:
        extra = {"X-Error-Code": error_code, "X-Error-Message": message}
        if commit:
            extra["X-Repo-Commit"] = commit
        self._json(code, {"error": message}, extra)

    def _body(self, data: bytes, headers: dict[str, str], drop_key: str | None = None,
              drop_ranged: bool = False) -> None:
        """200, or 206 for `Range: bytes=N-[M]`; paced by rate_bytes_s; cut once per `drop_key` when the
        drop_after_bytes knob is set (only a transfer from byte 0, unless `drop_ranged`: a xorb's byte range)."""
        start, end = 0, len(data) - 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        code = 200
        if m:
            start, end = int(m.group(1)), min(int(m.group(2) or end), end)
            if start > end:
                self._headers(416, {"Content-Range": f"bytes */{len(data)}", "Content-Length": "0"})
                return
            code = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        headers.update({"Content-Length": str(end - start + 1), "Accept-Ranges": "bytes",
                        "Content-Type": "application/octet-stream"})
        self._headers(code, headers)
        if self.command == "HEAD":
            return
        state = self.server.state
        rate = state.rate_bytes_s
        cut = None
        if (drop_key and (code == 200 or drop_ranged) and state.drop_after_bytes is not None
                and drop_key not in state.dropped):
            state.dropped.add(drop_key)
            cut = start + state.drop_after_bytes
        for off in range(start, end + 1, CHUNK):
            piece = data[off:min(off + CHUNK, end + 1)]
            allowed = state.take_budget(len(piece)) if drop_key else len(piece)
            if (cut is not None and off >= cut) or allowed == 0:
                self._cut()
                return
            self.wfile.write(piece[:allowed])
            if allowed < len(piece):
                self._cut()
                return
            if rate:
                self.wfile.flush()
                time.sleep(CHUNK / rate)

    def _cut(self) -> None:
        """The connection drops mid-body: the client sees fewer bytes than Content-Length said."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        state = self.server.state
        path = unquote(urlsplit(self.path).path)
        state.requests.append((self.command, path, self.headers.get("Range", "")))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if m:
            self._model_info(m.group(1), m.group(2) or "main")
            return
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/xet-read-token/([^/]+)", path)
        if m and state.xet:
            self._xet_token(m.group(1), m.group(2))
            return
        m = re.fullmatch(r"/xet/cas/v([12])/reconstructions/([0-9a-f]{64})", path)
        if m and state.xet:
            self._reconstruction(int(m.group(1)), m.group(2))
            return
        m = re.fullmatch(r"/xet/xorbs/([0-9a-f]{64})", path)
        if m and state.xet:
            self._xorb(m.group(1))
            return
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
        if m:
            self._tree(m.group(1), m.group(2), (m.group(3) or "").strip("/"))
            return
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            self._resolve(m.group(1), m.group(2), m.group(3))
            return
        self._error(404, "EntryNotFound", "Not found")

    def _revision(self, repo: str, rev: str) -> str | None:
        """The commit for `rev` (main or the commit id itself), after answering 404 when unknown."""
        state = self.server.state
        if repo not in state.repos:
            self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
            return None
        commit = state.commit(repo)
        if rev not in ("main", commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return commit

    def _gate(self, repo: str) -> bool:
        """True when the request may see `repo`'s files; else the real Hub's answer has been sent."""
        state = self.server.state
        if repo not in state.gated:
            return True
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer "):].strip() if auth.startswith("Bearer ") else ""
        if token and token in state.granted():
            return True
        if not token:
            self._error(401, "GatedRepo", f"Access to model {repo} is restricted. You must have access to it and be "
                                          "authenticated to access it. Please log in.")
        elif token.startswith("hf_"):
            self._error(403, "GatedRepo", f"Access to model {repo} is restricted and you are not in the authorized "
                                          f"list. Visit https://huggingface.co/{repo} to ask for access.")
        else:
            self._json(401, {"error": "Invalid credentials in Authorization header"},
                       {"X-Error-Message": "Invalid credentials in Authorization header"})
        return False

    def _model_info(self, repo: str, rev: str) -> None:
        commit = self._revision(repo, rev)
        if commit is None:
            return
        files = self.server.state.repos[repo]
        self._json(200, {"_id": commit[:24], "id": repo, "modelId": repo, "author": repo.split("/")[0],
                         "sha": commit, "private": False,
                         "gated": "manual" if repo in self.server.state.gated else False, "disabled": False,
                         "lastModified": "2026-01-01T00:00:00.000Z", "library_name": "transformers",
                         "tags": ["transformers", "safetensors"], "pipeline_tag": "text-generation",
                         "siblings": [{"rfilename": p} for p in sorted(files)]})

    def _tree(self, repo: str, rev: str, prefix: str) -> None:
        commit = self._revision(repo, rev)
        if commit is None or not self._gate(repo):
            return
        out = []
        for p, f in sorted(self.server.state.repos[repo].items()):
            if prefix and not p.startswith(prefix + "/"):
                continue
            entry: dict[str, object] = {"type": "file", "oid": f.git_oid, "size": len(f.data), "path": p}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}
                if self.server.state.xet:
                    entry["xetHash"] = f.xet_hash
            out.append(entry)
        self._json(200, out)

    def _resolve(self, repo: str, rev: str, name: str) -> None:
        commit = self._revision(repo, rev)
        if commit is None or not self._gate(repo):
            return
        f = self.server.state.repos[repo].get(name)
        if f is None:
            self._error(404, "EntryNotFound", f"Entry not found: {name}", commit)
            return
        headers = {"X-Repo-Commit": commit, "ETag": f'"{f.git_oid}"'}
        if f.lfs:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(len(f.data))})
        if f.lfs and self.server.state.xet:
            headers.update({"X-Xet-Hash": f.xet_hash,
                            "Link": f'<{self._base()}/api/models/{repo}/xet-read-token/{commit}>; rel="xet-auth", '
                                    f'<{self._base()}/xet/cas/v1/reconstructions/{f.xet_hash}>; '
                                    'rel="xet-reconstruction-info"'})
        self._body(f.data, headers, drop_key=f.path if f.lfs and self.command == "GET" else None)

    def _base(self) -> str:
        """This hub as the client reached it (its Host header): where the Xet links and the CAS point."""
        host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
        return f"http://{host}"

    def _xet_token(self, repo: str, rev: str) -> None:
        """The Xet read token of a repo revision: the CAS URL, an access token and its expiry, as headers (what
        huggingface_hub reads) and JSON (the real Hub sends both). Gated like the repo's files."""
        commit = self._revision(repo, rev)
        if commit is None or not self._gate(repo):
            return
        token, expiry = self.server.state.issue_xet_token()
        cas = f"{self._base()}/xet/cas"
        self._json(200, {"accessToken": token, "exp": expiry, "casUrl": cas},
                   {"X-Xet-Cas-Url": cas, "X-Xet-Access-Token": token, "X-Xet-Token-Expiration": str(expiry)})

    def _xet_authorized(self) -> bool:
        """True when the request carries a live access token of the token endpoint; else the CAS's 401 is sent."""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and self.server.state.xet_token_live(auth[len("Bearer "):].strip()):
            return True
        self._json(401, {"error": "Unauthorized: missing or expired access token"})
        return False

    def _reconstruction(self, version: int, file_hash: str) -> None:
        if not self._xet_authorized():
            return
        f = self.server.state.xet_file(file_hash)
        if f is None:
            self._json(404, {"error": f"file {file_hash} not found"})
            return
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        wanted = (int(m.group(1)), int(m.group(2)) if m.group(2) else None) if m else None
        try:
            doc = reconstruction(f.xorb, f"{self._base()}/xet/xorbs/{f.xorb.hash}", wanted, version)
        except RangeNotSatisfiable as exc:
            self._json(416, {"error": f"range not satisfiable: {exc}"})
            return
        self._json(200, doc)

    def _xorb(self, xorb_hash: str) -> None:
        """A xorb's bytes by range (a presigned URL on the real CAS: no token), cut like a plain LFS body."""
        xorb = self.server.state.xorb(xorb_hash)
        if xorb is None:
            self._error(404, "EntryNotFound", "No such xorb")
            return
        self._body(xorb.serialized, {"ETag": f'"{xorb_hash}"'}, drop_key=f"xorb:{xorb_hash}", drop_ranged=True)


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: HubState) -> None:
        super().__init__(address, _Handler)
        self.state = state


@dataclass
class Hub:
    """A running hub: its endpoint (for HF_ENDPOINT), its state, how to stop it."""

    server: HubHTTPServer
    host_dir: Path
    thread: threading.Thread = field(repr=False)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def state(self) -> HubState:
        return self.server.state

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        (self.host_dir / HUB_FILE).unlink(missing_ok=True)


def start_hub(host_dir: Path, address: str, port: int, shard_bytes: int = 1 << 20) -> Hub:
    """Serve the synthetic GLM-5-NVFP4 repo (and its gated twin) on address:port (0: any free port) in a daemon
    thread, and record the endpoint in <host_dir>/hub.json."""
    repo = glm5_repo(shard_bytes)
    server = HubHTTPServer((address, port), HubState({REPO_ID: repo, GATED_REPO_ID: repo}, gated={GATED_REPO_ID},
                                                     host_dir=host_dir))
    thread = threading.Thread(target=server.serve_forever, name=f"model-hub-{address}", daemon=True)
    thread.start()
    hub = Hub(server, host_dir, thread)
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / HUB_FILE).write_text(json.dumps({"endpoint": hub.url, "repos": [REPO_ID, GATED_REPO_ID],
                                                    "gated": [GATED_REPO_ID]}) + "\n")
    return hub


def grant_token(host_dir: Path, token: str) -> None:
    """The account of `token` is granted access to the gated repos of the hub of `host_dir` (a 0600 file)."""
    path = host_dir / TOKENS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a") as fh:
        fh.write(token.strip() + "\n")
