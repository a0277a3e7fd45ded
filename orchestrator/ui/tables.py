"""Tables that never cut a value: run ids, release ids and figures are what the next command needs.

rich shortens a cell that does not fit with '…' (`r-20…`), which made `deploy compare` unusable from a piped
`history --bench` at 80 columns. Here no word is ever split or shortened:

- on a terminal wide enough for every column's longest word, a rich table whose columns are at least that wide;
  longer text (a reason, a fix) wraps between words;
- otherwise (a pipe, a log, a narrow terminal) a plain layout: a title line, a header line and one line per row,
  columns aligned with two spaces, as long as the content needs. `--json` is the format for programs.

Cells are plain text; a `rich.text.Text` carries a style (its plain text is what the plain layout shows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

Cell = str | Text
Justify = Literal["left", "right", "center"]

#: rich's default box: one border character per column edge, and one space of padding on each side of a cell.
_EDGE, _PAD = 1, 2


@dataclass(frozen=True)
class Column:
    header: str
    justify: Justify = "left"


@dataclass(frozen=True)
class TableSpec:
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]


def spec(title: str, headers: Sequence[str | Column], rows: Sequence[Sequence[Cell]]) -> TableSpec:
    cols = tuple(h if isinstance(h, Column) else Column(h) for h in headers)
    return TableSpec(title, cols, tuple(tuple(r) for r in rows))


def plain(cell: Cell) -> str:
    return (cell.plain if isinstance(cell, Text) else cell).replace("\n", " ")


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def column_widths(t: TableSpec) -> tuple[list[int], list[int]]:
    """Per column: the narrowest width that splits no word, and the width that wraps nothing."""
    mins, naturals = [], []
    for i, col in enumerate(t.columns):
        cells = [plain(r[i]) for r in t.rows] + [col.header]
        mins.append(max(max(_longest_word(c) for c in cells), 1))
        naturals.append(max(max(len(c) for c in cells), 1))
    return mins, naturals


def fit_widths(mins: Sequence[int], naturals: Sequence[int], available: int) -> list[int] | None:
    """Content widths that fill at most `available` (the room left after borders and padding), or None.

    Every column gets its minimum; the room left goes to the columns that still wrap, the one that needs the
    least first, so that short columns (ids, figures) end up on one line and long prose takes the rest.
    """
    if sum(mins) > available:
        return None
    widths = list(mins)
    room = available - sum(widths)
    for i in sorted(range(len(widths)), key=lambda j: naturals[j] - mins[j]):
        grow = min(naturals[i] - widths[i], room)
        widths[i] += grow
        room -= grow
    return widths


def plain_lines(t: TableSpec) -> list[str]:
    """Title, header and one line per row; columns two spaces apart; nothing cut, nothing wrapped."""
    cells = [[c.header for c in t.columns], *[[plain(c) for c in r] for r in t.rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(t.columns))]
    lines = [t.title] if t.title else []
    for row in cells:
        parts = [c.rjust(w) if col.justify == "right" else c.ljust(w)
                 for c, w, col in zip(row, widths, t.columns, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return lines


def rich_table(t: TableSpec, widths: Sequence[int]) -> Table:
    table = Table(title=t.title or None)
    for col, w in zip(t.columns, widths, strict=True):
        table.add_column(col.header, justify=col.justify, width=w, overflow="fold")
    for row in t.rows:
        table.add_row(*(c if isinstance(c, Text) else Text(c) for c in row))
    return table


def print_table(console: Console, t: TableSpec) -> None:
    """A boxed table on a terminal that has room for it, the plain layout everywhere else."""
    if console.is_terminal:
        mins, naturals = column_widths(t)
        borders = len(t.columns) * (_PAD + _EDGE) + _EDGE
        widths = fit_widths(mins, naturals, console.width - borders)
        if widths is not None:
            console.print(rich_table(t, widths))
            return
    for line in plain_lines(t):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
