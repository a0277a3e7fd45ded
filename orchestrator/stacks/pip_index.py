"""pip's options for the inventory's package index: shared by the server's venv and the router's."""

from __future__ import annotations

import shlex


def pip_index_options(url: str | None) -> str:
    """`--index-url URL` (and `--trusted-host HOST` for a plain-http index) when the inventory names one.

    pip refuses a plain-http index on any host but localhost unless that host is trusted; an operator who wrote
    the URL into the inventory has made that choice, so the host of an http:// index is passed as trusted.
    """
    if url is None:
        return ""
    opts = f" --index-url {shlex.quote(url)}"
    if url.startswith("http://"):
        opts += f" --trusted-host {shlex.quote(url[len('http://'):].split('/', 1)[0])}"
    return opts
