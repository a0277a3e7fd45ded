"""Open an HTML report in a real headless Chromium and say what a reader would meet: script errors, broken images,
requests that leave the file, the screenshot.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages ended by NUL on
file descriptors 3 and 4), so no websocket client and no port is needed, and every error arrives as a typed event
(`Runtime.exceptionThrown`, a console `error`, a `Log.entryAdded` of level error) instead of a log line to grep.
Each run gets a new empty profile directory; nothing is fetched from outside (a report must reference no URL, and
any request that is not `file:`/`data:` is reported).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe", "--window-size=1280,1600", "--hide-scrollbars")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# What the page is asked after its load event: the text a reader sees, and every image that did not decode.
_PAGE_STATE = ("JSON.stringify({text: document.body ? document.body.innerText.length : 0,"
               " broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
               ".map(i => i.alt || i.src.slice(0, 40))})")


class BrowserError(RuntimeError):
    """Chromium did not start, answer or render within the deadline (not a finding about the page)."""


@dataclass
class PageCheck:
    """What one page did in the browser."""

    errors: list[str] = field(default_factory=list)  # uncaught exceptions, console errors, error log entries
    outside_requests: list[str] = field(default_factory=list)  # any URL that is not file: or data:
    broken_images: list[str] = field(default_factory=list)
    text_chars: int = 0
    screenshot: bytes = b""

    @property
    def screenshot_size(self) -> tuple[int, int]:
        """Width and height from the PNG's IHDR chunk; (0, 0) when the bytes are no PNG."""
        if not self.screenshot.startswith(PNG_MAGIC) or len(self.screenshot) < 24:
            return (0, 0)
        w, h = struct.unpack(">II", self.screenshot[16:24])
        return (int(w), int(h))

    def problems(self) -> list[str]:
        """Everything that makes the page broken for a reader; empty for a good page."""
        out = [f"script error: {e}" for e in self.errors]
        out += [f"request outside the file: {u}" for u in self.outside_requests]
        out += [f"image not rendered: {i}" for i in self.broken_images]
        if self.text_chars == 0:
            out.append("no text rendered")
        w, h = self.screenshot_size
        if w < 200 or h < 200 or len(self.screenshot) < 2000:
            out.append(f"implausible screenshot: {w}x{h}, {len(self.screenshot)} bytes")
        return out


def chromium() -> str | None:
    return shutil.which(CHROMIUM)


class _Pipe:
    """The DevTools protocol over Chromium's pipe: send a command, read messages until its answer, keep events."""

    def __init__(self, to_browser: int, from_browser: int, deadline: float) -> None:
        self.w, self.r, self.deadline = to_browser, from_browser, deadline
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                raise BrowserError("chromium did not answer before the deadline")
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed its DevTools pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            got = self._read_message()
            if got.get("id") == self.next_id:
                if "error" in got:
                    raise BrowserError(f"{method}: {got['error']}")
                result: dict[str, Any] = got.get("result", {})
                return result
            if "method" in got:
                self.events.append(got)

    def wait_event(self, method: str) -> None:
        while not any(e["method"] == method for e in self.events):
            got = self._read_message()
            if "method" in got:
                self.events.append(got)


def _describe(event: dict[str, Any]) -> str | None:
    """The error an event reports, or None for an event that is no error."""
    method, p = event["method"], event.get("params", {})
    if method == "Runtime.exceptionThrown":
        d = p.get("exceptionDetails", {})
        text = (d.get("exception") or {}).get("description") or d.get("text", "exception")
        return f"{text} (line {d.get('lineNumber', '?')})"
    if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
        return "console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description", "")))
                                                         for a in p.get("args", []))
    if method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
        e = p["entry"]
        return f"{e.get('source', 'log')}: {e.get('text', '')} {e.get('url', '')}".strip()
    return None


def check_page(page: Path, *, timeout: float = 60.0) -> PageCheck:
    """Load `page` in a fresh headless Chromium, wait for its load event, collect errors, take a screenshot."""
    exe = chromium()
    if exe is None:
        raise BrowserError("chromium is not installed (scripts/install.sh installs it)")
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="deploy-chromium-") as profile:
        to_r, to_w = os.pipe()  # we write commands, chromium reads them on fd 3
        from_r, from_w = os.pipe()  # chromium writes answers on fd 4, we read them
        child_r, child_w = os.dup(to_r), os.dup(from_w)

        def fds() -> None:  # runs in the child before exec: put the pipe ends on 3 and 4
            r, w = fcntl.fcntl(child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        log = Path(profile) / "chromium.stderr"  # a file, not a pipe nobody reads: chromium never blocks on it
        with log.open("wb") as err:
            proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}/data", "about:blank"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    pass_fds=(3, 4, child_r, child_w), preexec_fn=fds)
        for fd in (to_r, from_w, child_r, child_w):
            os.close(fd)
        try:
            return _drive(_Pipe(to_w, from_r, deadline), page)
        except BrowserError as exc:
            raise BrowserError(f"{exc}; chromium's stderr ends: {log.read_text(errors='replace')[-2000:]}") from exc
        finally:
            os.close(to_w)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            os.close(from_r)


def _drive(cdp: _Pipe, page: Path) -> PageCheck:
    target = next(t for t in cdp.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
    sid = cdp.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Page", "Network"):
        cdp.call(f"{domain}.enable", session=sid)
    cdp.events.clear()  # about:blank's own events
    cdp.call("Page.navigate", {"url": page.resolve().as_uri()}, session=sid)
    cdp.wait_event("Page.loadEventFired")
    # Two animation frames after load: scripts run from load handlers and timers of 0 have had their turn.
    cdp.call("Runtime.evaluate", {"expression": "new Promise(r => requestAnimationFrame(() => "
                                                "requestAnimationFrame(() => setTimeout(r, 0))))",
                                  "awaitPromise": True}, session=sid)
    state = json.loads(cdp.call("Runtime.evaluate", {"expression": _PAGE_STATE, "returnByValue": True},
                                session=sid)["result"]["value"])
    shot = cdp.call("Page.captureScreenshot", {"format": "png"}, session=sid)["data"]
    check = PageCheck(text_chars=int(state["text"]), broken_images=[str(b) for b in state["broken"]],
                      screenshot=base64.b64decode(shot))
    for e in cdp.events:
        if (text := _describe(e)) is not None:
            check.errors.append(text)
        if e["method"] == "Network.requestWillBeSent":
            url = e["params"]["request"]["url"]
            if not url.startswith(("file:", "data:")):
                check.outside_requests.append(url)
    try:
        cdp.call("Browser.close")
    except BrowserError:
        pass  # it closes the pipe as it goes
    return check
