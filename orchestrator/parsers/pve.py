"""Pure parsers for PVE command output: `pct status`, container config JSON, property strings."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.parsers import ParseError


def parse_pct_status(text: str) -> str | None:
    """`status: running` → "running"; None when the output is not a status line (e.g. no such CT)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "status" and value.strip():
            return value.strip()
    return None


def parse_config_json(text: str) -> dict[str, Any]:
    """`pvesh get …/config --output-format json` or the API's data: keys → values, plus `digest`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError("container config is not JSON", text) from exc
    if isinstance(data, dict) and "data" in data and len(data) == 1:
        data = data["data"]
    if not isinstance(data, dict):
        raise ParseError("container config JSON is not an object", text)
    return data


def parse_property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    """`/dev/nvidia0,mode=0666` → {"path": "/dev/nvidia0", "mode": "0666"} with the schema's default key."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if sep:
            out[key] = val
        elif default_key is not None:
            out[default_key] = key
        else:
            out[key] = ""
    return out


def volids(templates_json: str) -> set[str]:
    try:
        data = json.loads(templates_json)
    except json.JSONDecodeError:
        return set()
    return {str(item.get("volid")) for item in data if isinstance(item, dict)} if isinstance(data, list) else set()
