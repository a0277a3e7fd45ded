"""`pvesh`'s default `--output-format text`, the way pve-common's CLIFormatter lays it out.

An object becomes a key/value table, a list of objects a table with one column per property (the return
schema's required properties sorted, then its optional ones; else every key seen), sorted by the first column;
a scalar is printed as is. Tables have box borders (UTF-8 box drawing when the locale is UTF-8, `+-|` otherwise);
`--noborder` and `--noheader` drop them. Value renderers (bytes, durations) are not simulated: raw values print.
"""

from __future__ import annotations

import json
import os
from typing import Any


def _utf8() -> bool:
    for var in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(var)
        if value:
            return "utf-8" in value.lower() or "utf8" in value.lower()
    return False


def _text(value: Any, prop: dict[str, Any]) -> str:
    if value is None:
        return ""
    if prop.get("type") == "boolean":
        return "1" if value else "0"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def _props(schema_props: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    if schema_props:
        required = sorted(k for k, v in schema_props.items() if not v.get("optional"))
        optional = sorted(k for k, v in schema_props.items() if v.get("optional"))
        return required + optional
    return sorted({k for row in rows for k in row})


def table(rows: list[dict[str, Any]], cols: list[str], props: dict[str, Any], *, border: bool = True,
          header: bool = True) -> str:
    """One text table (print_text_table): rows sorted by the first column, numbers right-aligned."""
    if cols:
        numeric = props.get(cols[0], {}).get("type") in ("integer", "number")
        rows = sorted(rows, key=lambda r: (r.get(cols[0]) is None,
                                           r.get(cols[0]) if numeric else str(r.get(cols[0], ""))))
    cells = [[_text(r.get(c), props.get(c, {})).split("\n") for c in cols] for r in rows]
    widths = [max([len(c)] + [len(line) for row in cells for line in row[i]]) for i, c in enumerate(cols)]
    right = [props.get(c, {}).get("type") in ("integer", "number") for c in cols]

    def fmt(values: list[str]) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)]
        if not border:
            return " ".join([*parts[:-1], values[-1]]) if parts else ""
        bar = "│" if _utf8() else "|"
        return f"{bar} " + f" {bar} ".join(parts) + f" {bar}"

    def rule(left: str, fill: str, mid: str, end: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + end

    if _utf8():
        top, head, mid, bottom = (rule("┌", "─", "┬", "┐"), rule("╞", "═", "╪", "╡"), rule("├", "─", "┼", "┤"),
                                  rule("└", "─", "┴", "┘"))
    else:
        mid = rule("+", "-", "+", "+")
        top, head, bottom = mid, rule("+", "=", "+", "+"), mid
    out: list[str] = [top] if border else []
    if header:
        out.append(fmt(cols))
    sep = head if header else mid
    for i, row in enumerate(cells):
        if border and (i or header):
            out.append(sep)
            sep = mid
        for n in range(max(len(c) for c in row) if row else 1):
            out.append(fmt([c[n] if n < len(c) else "" for c in row]))
    if border:
        out.append(bottom)
    return "\n".join(out) + "\n"


def render(data: Any, returns: dict[str, Any], *, border: bool = True, header: bool = True) -> str:
    """print_api_result for `--output-format text`."""
    if data is None or returns.get("type") == "null":
        return ""
    if isinstance(data, dict):
        props = returns.get("properties") or {}
        keys = [k for k in _props(props, [data]) if data.get(k) is not None]
        if not props:
            keys = sorted(k for k in data if data[k] is not None)
        rows = [{"key": k, "value": _text(data[k], props.get(k, {}))} for k in keys]
        return table(rows, ["key", "value"], {}, border=border, header=header)
    if isinstance(data, list):
        if not data:
            return ""
        if all(isinstance(d, dict) for d in data):
            props = (returns.get("items") or {}).get("properties") or {}
            return table(data, _props(props, data), props, border=border, header=header)
        return table([{"value": v} for v in data], ["value"], {}, border=border, header=False)
    return f"{data}\n"
