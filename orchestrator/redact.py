"""Secret redaction, applied at every boundary where data leaves the process: terminal, `--json`, the ledger,
reports, and evidence files the tool writes into releases on the target.

Three rules, because a secret reaches output by three routes:
- by name: a mapping key that names a secret (`api_key`, `admin_api_key`, `token_secret`, `password`, …), as in
  sglang's `/server_info`;
- by value: any occurrence of a secret this process has read (the profile's API key, the PVE token secret), as
  registered by `register_secret` when the secret is read;
- by shape: text that carries a secret after a known marker, as in sglang's startup log
  `server_args=ServerArgs(… api_key='…' …)`, a command line `--api-key X`, or an `Authorization: Bearer X` header.

Pure code apart from the process-wide set of registered values; importing it imports nothing of the tool.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any, TextIO

REDACTED = "<redacted>"
#: What evidence holds instead of a secret server flag whose value lives in the release's 0600 secrets.yaml (a
#: reference, not a redaction: the next release reads the value back from that file). Safe to print as it is.
SECRET_REF = "<secret: secrets.yaml>"

#: Shorter values are not replaced by value: a 3-character "secret" would turn ordinary text into confetti.
MIN_VALUE_LEN = 6

# A key names a secret when its last word is one of these (`admin_api_key`, `hf_token`, `token_secret`), but not
# when it merely contains one (`max_total_num_tokens`, `tokenizer_path`, `token_id`).
_SECRET_WORDS = r"(?:api[_-]?key|token|secret|password|passwd|passphrase|authorization|credentials?|private[_-]?key)"
_SECRET_KEY = re.compile(rf"^(?:[a-z0-9]+_)*{_SECRET_WORDS}$")

_lock = threading.Lock()
_values: set[str] = set()


def is_secret_key(key: str) -> bool:
    """`api_key`, `--api-key`, `Admin-Api-Key`, `token_secret`: yes. `tokens`, `token_id`, `tokenizer`: no."""
    norm = key.strip().lstrip("-").lower().replace("-", "_")
    return bool(_SECRET_KEY.match(norm))


def register_secret(value: str | None) -> None:
    """Remember a secret value so every later redaction replaces it wherever it appears."""
    if value and len(value.strip()) >= MIN_VALUE_LEN:
        with _lock:
            _values.add(value.strip())


def registered_count() -> int:
    return len(_values)


def forget_secrets() -> None:
    """Tests only: start from an empty set of registered values."""
    with _lock:
        _values.clear()


# Text shapes. Each pattern keeps its marker in group 1 and the secret in group 2.
_K = rf"[A-Za-z0-9_-]*?{_SECRET_WORDS}"
_TEXT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # Python reprs and JSON: api_key='x', 'api_key': 'x', "api_key": "x", api_key="x"
    re.compile(rf"""((?<![A-Za-z0-9])['"]?{_K}['"]?\s*[=:]\s*)('(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""",
               re.IGNORECASE),
    # Unquoted assignments: api_key=x, SGLANG_API_KEY=x, token_secret=x (not `api_key=None`)
    re.compile(rf"""((?<![A-Za-z0-9])[A-Za-z0-9_]*?{_SECRET_WORDS}=)(?!None\b|null\b|<redacted>)([^\s'",)}}\]]+)""",
               re.IGNORECASE),
    # Command lines and YAML: --api-key x, --api-key=x, api-key: x
    re.compile(rf"""((?<![A-Za-z0-9])--{_K}(?:=|\s+))(?!<redacted>)([^\s'"]+)""", re.IGNORECASE),
    re.compile(rf"""(^\s*{_K}:[ \t]+)(?!<redacted>|['"])([^\s#][^\n#]*?)(?=[ \t]*(?:#|$))""",
               re.IGNORECASE | re.MULTILINE),
    # HTTP: Authorization: Bearer x (PVEAPIToken=… is an unquoted assignment above)
    re.compile(r"""(\bBearer\s+)(?!<redacted>)([A-Za-z0-9._~+/=-]+)""", re.IGNORECASE),
)


#: The same "by name" rule as a GNU `sed -E` script, for files written on the target that the tool does not write
#: itself: bench_serving's JSONL embeds the server's /server_info, `api_key` and `admin_api_key` included
#: (scripts/bench_group.sh.j2 runs it over the file before it takes its final name). A JSON string value of a
#: secret-named key becomes "<redacted>"; every other byte stays as it was, so the file is still one JSON object a
#: line.
SECRET_JSON_SED = (
    r's/("([a-z0-9]+[_-])*(api[_-]?key|token|secret|password|passwd|passphrase|authorization|credentials?|'
    r'private[_-]?key)"[[:space:]]*:[[:space:]]*)"([^"\\]|\\.)*"/\1"' + REDACTED + '"/gI'
)


def _quoted(value: str) -> str:
    q = value[:1]
    return f"{q}{REDACTED}{q}" if q in ("'", '"') else REDACTED


def redact_text(text: str) -> str:
    """Replace registered secret values and secret-shaped substrings by <redacted>."""
    if not text:
        return text
    with _lock:
        values = sorted(_values, key=len, reverse=True)
    for v in values:
        if v in text:
            text = text.replace(v, REDACTED)
    for pat in _TEXT_PATTERNS:
        text = pat.sub(lambda m: m.group(1) + _quoted(m.group(2)), text)
    return text


def redact(obj: Any) -> Any:
    """A copy of `obj` (dicts, lists, tuples, strings, scalars) with every secret replaced by <redacted>."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            # Only strings are secrets: `j_per_output_token: 0.42` is a figure, `api_key: null` visibly unset.
            if isinstance(k, str) and isinstance(v, str) and v and v != SECRET_REF and is_secret_key(k):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v) for v in obj)
    return obj


def contains_secret(text: str) -> bool:
    return redact_text(text) != text


class RedactingStream:
    """A text stream that redacts everything written through it (sys.stdout / sys.stderr of the CLI)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(redact_text(s))
        return len(s)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, fileno, encoding, …
        return getattr(self._inner, name)


def install_stream_redaction() -> None:
    """Wrap sys.stdout and sys.stderr once per process, so no code path can print a secret to the terminal."""
    import sys

    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)
