"""A PEP 503 "simple" package index over the wheelhouse, one per simulated host.

Why: the tool installs sglang in a real container with the container's real pip and `--index-url`, as an
air-gapped site would from its own mirror. The LXC runtime starts this on the host's bridge address; tests
start it on a loopback address. Stdlib only (threaded http.server); it serves files and nothing else.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import tempfile
import threading
import zipfile
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

from .realhouse import real_wheelhouse_dir, wheels_of
from .wheelhouse import fill

INDEX_FILE = "index.json"  # in the host dir: where this host's index listens
#: In the sim root: wheels published while the hosts run (`deploy sim index publish`), served by every host's
#: index beside the wheelhouse, as a site's mirror that picked up a new upload.
PUBLISHED_DIR = "index-published"
#: Where a host's index serves the real stacks' wheelhouse (realhouse.py, $DEPLOY_SIM_REAL_WHEELHOUSE), when set:
#: `http://BRIDGE:3141/real/simple`, the index URL of a profile that installs the real sglang.
REAL_PREFIX = "/real"
#: What the real index lists: wheels, and the source archives of a closure that has no wheel of a pin for its Python
#: (sglang 0.5.23 on 3.13: outlines_core 0.1.26), so the container's pip resolves as against a public index.
REAL_SUFFIXES = (".whl", ".tar.gz")


def normalize(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(filename: str) -> str:
    """The normalised project name of a wheel file (its first dash-separated field)."""
    return normalize(filename.split("-", 1)[0])


@cache
def _sha256(path: Path, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_of(path: Path) -> str:
    st = path.stat()
    return _sha256(path, st.st_mtime_ns, st.st_size)


@cache
def _core_metadata(path: Path, mtime_ns: int, size: int) -> bytes | None:
    try:
        with zipfile.ZipFile(path) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            return zf.read(names[0]) if len(names) == 1 else None
    except (OSError, zipfile.BadZipFile):
        return None


def core_metadata(wheel: Path) -> bytes | None:
    """The wheel's METADATA, as a registry serves it beside the file (PEP 658 `<file>.metadata`): pip resolves from
    it without downloading the wheel. None for a wheel without exactly one."""
    st = wheel.stat()
    return _core_metadata(wheel, st.st_mtime_ns, st.st_size)


def _anchor_attrs(wheel: Path) -> dict[str, str]:
    """PEP 658 and PEP 714 attributes of a file's link: the hash of its metadata file."""
    meta = core_metadata(wheel)
    if meta is None:
        return {}
    digest = "sha256=" + hashlib.sha256(meta).hexdigest()
    return {"data-dist-info-metadata": digest, "data-core-metadata": digest}


def _page(title: str, links: list[tuple[str, str]], attrs: list[dict[str, str]] | None = None) -> bytes:
    def extra(i: int) -> str:
        return "".join(f' {k}="{html.escape(v)}"' for k, v in (attrs[i] if attrs else {}).items())

    body = "".join(f'    <a href="{html.escape(href)}"{extra(i)}>{html.escape(text)}</a><br/>\n'
                   for i, (href, text) in enumerate(links))
    return (f"<!DOCTYPE html>\n<html>\n  <head><meta name=\"pypi:repository-version\" content=\"1.0\">"
            f"<title>{html.escape(title)}</title></head>\n  <body>\n{body}  </body>\n</html>\n").encode()


class _Handler(BaseHTTPRequestHandler):
    server: IndexHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(f"{self.command} {self.path}")

    def _send(self, code: int, body: bytes, ctype: str = "text/html; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_file(self, found: Path) -> None:
        """A wheel streamed in 1 MiB chunks: a real one is up to GBs (torch), too big to read into memory. Every
        wheel (real or stand-in) says what a public registry says of a file (immutable: a file name is taken once,
        `publish` refuses another build under it), so the container's pip keeps it in its cache as it does on a
        real site (the bytes the disk budget counts and empties, issue 48)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Cache-Control", "max-age=365000000, immutable, public")
        self.send_header("Content-Length", str(found.stat().st_size))
        self.end_headers()
        if self.command != "HEAD":
            with open(found, "rb") as fh:
                shutil.copyfileobj(fh, self.wfile, 1 << 20)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        root = self.server.wheelhouse
        path = unquote(self.path.split("?", 1)[0])
        published = self.server.published
        extra = sorted(published.glob("*.whl")) if published is not None and published.is_dir() else []
        wheels = sorted([*root.glob("*.whl"), *extra], key=lambda w: w.name)
        base = ""
        if path == REAL_PREFIX or path.startswith(REAL_PREFIX + "/"):
            # The real stacks' wheels, an index of their own: a real sglang beside a stand-in of the same
            # version on one index would make pip's choice a matter of wheel tags.
            real = self.server.real
            wheels = sorted(f for f in real.iterdir() if f.name.endswith(REAL_SUFFIXES)) \
                if real is not None and real.is_dir() else []
            path, base = path[len(REAL_PREFIX):] or "/", REAL_PREFIX
        if path in ("/simple", "/simple/"):
            names = sorted({project_of(w.name) for w in wheels})
            self._send(200, _page("Simple index", [(f"{base}/simple/{n}/", n) for n in names]))
            return
        m = re.fullmatch(r"/simple/([^/]+)/?", path)
        if m:
            if not path.endswith("/"):
                self.send_response(301)
                self.send_header("Location", base + path + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            files = [w for w in wheels if project_of(w.name) == normalize(m.group(1))]
            if not files:
                self._send(404, b"Not Found\n", "text/plain")
                return
            links = [(f"{base}/files/{w.name}#sha256={sha256_of(w)}", w.name) for w in files]
            # The real wheels' links carry their metadata's hash, as a public registry's do (PEP 658/714): a
            # resolution (`deploy lock`) then reads ~200 METADATA files instead of downloading ~4 GB of wheels.
            attrs = [_anchor_attrs(w) for w in files] if base == REAL_PREFIX else None
            self._send(200, _page(f"Links for {m.group(1)}", links, attrs))
            return
        m = re.fullmatch(r"/files/([^/]+\.whl)\.metadata", path)
        wheel = next((w for w in wheels if m and base == REAL_PREFIX and w.name == m.group(1)), None)
        meta = core_metadata(wheel) if wheel is not None and wheel.is_file() else None
        if meta is not None:
            self._send(200, meta, "application/octet-stream")
            return
        m = re.fullmatch(r"/files/([^/]+(?:\.whl|\.tar\.gz))", path)
        found = next((w for w in wheels if m and w.name == m.group(1)), None)
        if found is not None and found.is_file():
            self._send_file(found)
            return
        self._send(404, b"Not Found\n", "text/plain")


class IndexHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], wheelhouse: Path, published: Path | None = None,
                 real: Path | None = None) -> None:
        super().__init__(address, _Handler)
        self.wheelhouse = wheelhouse
        self.published = published
        self.real = real
        self.requests: list[str] = []


@dataclass
class PackageIndex:
    """A running index: its URL for `pip install --index-url`, and how to stop it."""

    server: IndexHTTPServer
    host_dir: Path
    thread: threading.Thread = field(repr=False)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/simple"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        (self.host_dir / INDEX_FILE).unlink(missing_ok=True)


def start_index(host_dir: Path, address: str, port: int, wheelhouse: Path | None = None) -> PackageIndex:
    """Fill the wheelhouse if needed, serve it on address:port (port 0: any free one) in a daemon thread, and
    record the URL in <host_dir>/index.json. A host of a sim root (<root>/hosts/NAME) also serves the root's
    published wheels (PUBLISHED_DIR, `deploy sim index publish`), read on every request; with
    $DEPLOY_SIM_REAL_WHEELHOUSE set, the real stacks' wheels under REAL_PREFIX."""
    wh = fill(wheelhouse)
    published = host_dir.parent.parent / PUBLISHED_DIR if host_dir.parent.name == "hosts" else None
    real = wheels_of(real_wheelhouse_dir()) if os.environ.get("DEPLOY_SIM_REAL_WHEELHOUSE") else None
    server = IndexHTTPServer((address, port), wh.path, published, real)
    thread = threading.Thread(target=server.serve_forever, name=f"pkg-index-{address}", daemon=True)
    thread.start()
    idx = PackageIndex(server, host_dir, thread)
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / INDEX_FILE).write_text(json.dumps({"url": idx.url, "wheelhouse": str(wh.path)}) + "\n")
    return idx


class PublishRefused(ValueError):
    """A publish the index would not take: what was wrong, and the line that fixes it (the CLI's ConfigError)."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix


def check_publish(name: str, version: str, regression: str | None = None) -> str:
    """Pure: the normalised stand-in name of a publish, or PublishRefused. The version must be a PEP 440 one that is
    not the wheelhouse's own build (an index takes a file name once); sglang needs a flag schema for its release."""
    from .wheels import REGRESSIONS, SGLANG_PINS, SPECS, WHEELHOUSE_VERSIONS, public_version

    project = normalize(name)
    if project not in SPECS:
        raise PublishRefused(f"no stand-in package {name!r} to publish",
                             f"publish one of {', '.join(SPECS)} (e.g. deploy sim index publish flashinfer-python "
                             "0.7.2+cu130)")
    if not re.fullmatch(r"\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?", version):
        raise PublishRefused(f"{version!r} is not a version pip accepts (PEP 440)",
                             "give a version such as 0.7.3 or a local build of a pinned one, 0.7.2+cu130")
    if regression is not None and regression not in REGRESSIONS:
        raise PublishRefused(f"no regression {regression!r}", f"--regression takes {', '.join(REGRESSIONS)}")
    if project == "sglang" and public_version(version) not in SGLANG_PINS:
        raise PublishRefused(f"the simulator has no flag schema for sglang {public_version(version)}",
                             f"publish sglang at a local build of {' or '.join(SGLANG_PINS)} (e.g. 0.5.23+rebuild1)")
    if version in WHEELHOUSE_VERSIONS[project]:
        raise PublishRefused(f"the index already serves the wheelhouse's {project} {version}",
                             f"publish a newer build: another version, or a local build of this one "
                             f"({version}+rebuild1)")
    return project


def publish(root: Path, name: str, version: str, regression: str | None = None) -> Path:
    """A new build of a stand-in package in the root's published wheels, served at once by every host's index of
    that root (check_publish says which). `regression` (nan, slow, unsupported-arch) goes inside the wheel: a venv
    that resolves this build misbehaves at start. Publishing the same file again is a no-op; another build under
    the same file name is refused, as a real index refuses a re-upload."""
    from .wheels import SPECS, build_wheel

    spec = SPECS[check_publish(name, version, regression)](version, regression)
    out = root / PUBLISHED_DIR
    existing = out / spec.filename
    if existing.is_file():
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            same = build_wheel(spec, Path(tmp)).read_bytes() == existing.read_bytes()
        if not same:
            raise PublishRefused(f"{spec.filename} is already published as another build",
                                 "publish under another version (an index takes a file name once)")
        return existing
    out.mkdir(parents=True, exist_ok=True)
    return build_wheel(spec, out)


def regression_of(wheel: Path) -> str | None:
    """The regression a published wheel carries (None: a good build), read from the file itself."""
    import zipfile

    from .wheels import REGRESSION_MODULE

    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/" + REGRESSION_MODULE)), None)
        if name is None:
            return None
        m = re.search(r"^REGRESSION = '([^']+)'$", zf.read(name).decode(), re.M)
    return m.group(1) if m else None


def published(root: Path) -> list[tuple[str, str, str | None]]:
    """The root's published wheels: (file name, sha256, regression or None)."""
    return [(w.name, sha256_of(w), regression_of(w)) for w in sorted((root / PUBLISHED_DIR).glob("*.whl"))]
