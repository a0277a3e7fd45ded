"""What a value may hold to travel through a systemd unit file unchanged, and how long it may be.

Server flags end up on the unit's ExecStart line, env values in an EnvironmentFile. Both are line-based, and so is
the tool's own unit diff (`str.splitlines`), so a value that holds a line break of any kind cannot arrive as
written. The rules:

- refused: every control character (Unicode category Cc: NUL, the other C0 controls, DEL and the C1 controls
  such as U+0085 NEXT LINE), the line and paragraph separators U+2028/U+2029, and lone surrogates (not encodable
  as UTF-8). This covers every character at which `str.splitlines` breaks a line, newline and carriage return
  included: systemd's escapes could carry a newline, but in a flag it is nearly always a YAML block scalar's
  accidental trailing newline, and it would split the value in `ps`, the journal and every diff;
- allowed: TAB. The unit renderer writes it as the escape `\\t` inside double quotes, the unit line stays one
  line, and systemd's unquoting gives the TAB back (tests/unit/test_input_limits.py shows both);
- length: one value at most MAX_VALUE_CHARS characters, all server flags together at most
  MAX_COMMAND_LINE_CHARS characters as rendered (names, values and the spaces between them). Real sglang values,
  JSON overrides and batch-size lists included, stay far below both; 120,000 characters is a paste accident.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

#: A flag value as the inventory, --set and --flags write it (before the schema types it).
FlagValue = str | int | float | bool | None | list[str | int | float]

MAX_VALUE_CHARS = 8192
MAX_COMMAND_LINE_CHARS = 32768

_NAMES = {
    "\x00": "NUL", "\n": "LINE FEED (newline)", "\r": "CARRIAGE RETURN", "\x0b": "VERTICAL TAB",
    "\x0c": "FORM FEED", "\x1c": "FILE SEPARATOR", "\x1d": "GROUP SEPARATOR", "\x1e": "RECORD SEPARATOR",
    "\x1b": "ESCAPE", "\x7f": "DELETE", "\x85": "NEXT LINE",
}
_REFUSED_CATEGORIES = frozenset({"Cc", "Zl", "Zp", "Cs"})
VALUE_FIX = ("shorten the value, or remove the character named (write JSON on one line; a YAML block scalar "
             "`|` or `>` adds a newline)")


class UnitTextError(ValueError):
    """A value that cannot go into a unit or env file; `key` is the flag or env name it belongs to ('' for a
    plain field), so the inventory loader can point at that key's line."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


def char_label(ch: str) -> str:
    """`U+2028 LINE SEPARATOR`: the code point and, where Unicode has one, its name."""
    name = _NAMES.get(ch) or unicodedata.name(ch, "") or "a control character"
    return f"U+{ord(ch):04X} {name}"


def refused_char(text: str) -> tuple[int, str] | None:
    """(1-based position, character) of the first character a unit file cannot carry, or None."""
    for i, ch in enumerate(text, 1):
        if ch != "\t" and unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return i, ch
    return None


def text_problem(text: str, *, max_chars: int = MAX_VALUE_CHARS) -> str | None:
    """Why `text` cannot be a value in a unit or env file, or None when it can."""
    if len(text) > max_chars:
        return f"value is {len(text):,} characters long; the limit is {max_chars:,}"
    bad = refused_char(text)
    if bad is not None:
        pos, ch = bad
        return (f"value contains {char_label(ch)} at character {pos}; a unit file cannot carry it unchanged "
                "(it breaks the line or is not text)")
    return None


def value_texts(value: object) -> list[str]:
    """The texts a flag value renders to: one per list item, one for a scalar, none for a bare switch."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def flag_value_problem(value: object) -> str | None:
    """A flag value's problem: a refused character in any item, or the value (items joined by spaces) too long."""
    texts = value_texts(value)
    joined = " ".join(texts)
    if len(joined) > MAX_VALUE_CHARS:
        return f"value is {len(joined):,} characters long; the limit is {MAX_VALUE_CHARS:,}"
    for t in texts:
        problem = text_problem(t)
        if problem:
            return problem
    return None


def command_line_problem(words: Iterable[str]) -> str | None:
    """The rendered server flags as a whole (words joined by single spaces) over MAX_COMMAND_LINE_CHARS."""
    total = len(" ".join(words))
    if total > MAX_COMMAND_LINE_CHARS:
        return (f"the server flags render to {total:,} characters; the limit for the whole command line is "
                f"{MAX_COMMAND_LINE_CHARS:,}")
    return None
