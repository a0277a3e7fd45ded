"""Small line formats the facts print themselves (pure): `DIGEST PATH` lines and `NAME<TAB>RECORD` lines."""

from __future__ import annotations


def path_digests(text: str) -> dict[str, str]:
    """`DIGEST PATH` a line (the unit_sha fact) → {path: digest}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, path = line.partition(" ")
        out[path.strip()] = digest
    return out


def named_records(text: str) -> list[tuple[str, str]]:
    """`NAME<TAB>RECORD` a line (the current_bench fact: a bench file and its last record) → [(name, record)]."""
    out = []
    for line in text.splitlines():
        name, _, record = line.partition("\t")
        out.append((name, record))
    return out
