"""`json.loads` for the container's nvidia-smi, without importing `json`.

`json` imports `re` (and with it enum, functools, collections): ~6 ms of a ~20 ms run, more than the files it
reads (host.json, the load files) cost to parse. `json` itself decodes with the C scanner of `_json`; this module
calls that scanner the way `json.JSONDecoder` configures it by default, so a document it accepts gives the same
value. Anything else (invalid JSON, a BOM, no `_json`) goes to the real `json.loads`, which returns or raises
exactly what `json.loads` does.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"  # json.decoder.WHITESPACE
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Defaults:
    """What `_json.make_scanner` reads from a default `json.JSONDecoder`."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    try:
        from _json import make_scanner
    except ImportError:
        return None
    # typeshed types the context as a scanner; the C code reads only the attributes _Defaults has
    scan: Callable[[str, int], tuple[Any, int]] = make_scanner(_Defaults())  # type: ignore[arg-type]
    return scan


_SCAN = _scanner()


def loads(text: str) -> Any:
    """`json.loads(text)` for a str."""
    if _SCAN is not None:
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            obj, end = _SCAN(text, start)
        except (StopIteration, ValueError):
            pass
        else:
            if not text[end:].strip(_WHITESPACE):
                return obj
    import json

    return json.loads(text)
