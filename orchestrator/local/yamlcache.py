"""Decoded YAML kept between runs, by content: what the inventory, playbook and Xid catalog files decode to.

Why: every command decodes the same few files, unchanged from run to run, and the decoder (PyYAML, loaded only to
decode, and the duplicate-key and alias checks in Python) cost a converged single-host run ~0.03 s of CPU
(tests/perf/client_cost.py). An entry is the JSON of one decoded document, named by the SHA-256 of the text and of
the decoding code (orchestrator/yamlfile.py and this file), so an edited file or another deploy decodes afresh and
a stale entry is never read: the same text through the same code gives the same value. Only what JSON gives back
exactly is stored (no dates, sets, binary or non-string keys), only a document that decoded without error (every
error still comes from the decoder, with its line), and never one that holds a secret: a document that
orchestrator.redact would change (a key named like a secret, a token-shaped value) is decoded every time.
Entries live in `<state dir>/cache/yaml/`, the directory 0700 and each file 0600; a missing, unreadable or
broken entry is decoded again, and a failed write only costs the next run the decode. An entry is trusted like the
decoder's own answer, so it is read only from a state dir no other user can write (else the command is refused,
localfile.private_state_dir), opened without following a link, and only when this user owns it and nobody else may
write it (localfile.read_private_file): before issue 50 an entry `nobody` planted for router.yaml sent root's
router API key to `nobody`'s listener.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from orchestrator.local.files import private_state_dir

#: Bump when an entry's meaning changes without a change to the decoding code's own text.
FORMAT = 1
_MISSING = object()


@functools.cache
def _code_digest() -> str:
    """The decoding code: our two files, and PyYAML's own (its __init__.py, which names its version, and the files
    of its package, libyaml's extension among them), found without importing it. A change to any starts anew."""
    import importlib.util
    import os

    h = hashlib.sha256(str(FORMAT).encode())
    for path in (Path(__file__).with_name("yamlfile.py"), Path(__file__)):
        h.update(path.read_bytes())
    spec = importlib.util.find_spec("yaml")
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        h.update(origin.read_bytes())
        h.update("\0".join(sorted(n for n in os.listdir(origin.parent) if n.endswith((".py", ".so")))).encode())
    return h.hexdigest()


def cache_dir() -> Path:
    return private_state_dir() / "cache" / "yaml"


def entry_path(text: str) -> Path:
    key = hashlib.sha256(f"{_code_digest()}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()
    return cache_dir() / f"{key}.json"


def lookup(text: str) -> Any:
    """The decoded document of `text` from an earlier run, or MISSING."""
    from orchestrator.errors import ConfigError
    from orchestrator.local.files import read_private_file

    path = entry_path(text)  # a state dir others can write: the ConfigError is the command's
    try:
        found = read_private_file(path, "YAML cache entry")
        return _MISSING if found is None else json.loads(found)["data"]
    except (ConfigError, OSError, ValueError, KeyError, TypeError):
        return _MISSING


def storable(data: Any) -> bool:
    """JSON gives `data` back exactly, and it holds nothing the redactor would hide."""
    from orchestrator.redact import redact

    try:
        exact = json.loads(json.dumps(data, allow_nan=False)) == data
    except (TypeError, ValueError, RecursionError):
        return False
    return exact and redact(data) == data


def store(text: str, data: Any) -> None:
    """Keep the decoded document of `text` for the next run, when it is storable; never fails the caller."""
    from orchestrator.local.files import write_file

    if not storable(data):
        return
    path = entry_path(text)
    try:
        for folder in (path.parent.parent, path.parent):  # <state>/cache and <state>/cache/yaml, both 0700
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_file(path, json.dumps({"data": data}), mode=0o600)
    except OSError:
        return


def is_missing(value: Any) -> bool:
    return value is _MISSING
