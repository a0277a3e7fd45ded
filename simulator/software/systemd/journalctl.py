"""`journalctl -u UNIT [-n N] [-o cat] [-f] [-q] [--show-cursor] [--after-cursor C] [--no-pager] [--since ...]`
over ct/<vmid>/journal/<unit>.log.

Lines are stored in journalctl's default "short" format; `-o cat` strips the "Mon DD HH:MM:SS host ident[pid]: "
prefix, which is what log scrapers in the deploy tool read. A cursor is `sim;u=UNIT;i=N`, the position after
the N-th line of the unit's log (real cursors are opaque too); `--after-cursor` shows what follows it, and
`--show-cursor` prints `-- cursor: …` after the last entry shown, as journalctl does.
"""

from __future__ import annotations

import re
import sys
import time

from .state import CtUnits, unit_name

PREFIX = re.compile(r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s\[]+\[\d+\]: ")
IGNORED_WITH_VALUE = ("--since", "-S", "--until", "-U", "-b", "--boot", "-p", "--priority")


def run(argv: list[str], units: CtUnits) -> int:
    names: list[str] = []
    count: int | None = None
    cat = follow = quiet = show_cursor = False
    after: int | None = None
    i = 0
    while i < len(argv):
        a = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if a in ("-u", "--unit"):
            names.append(unit_name(nxt))
            i += 2
            continue
        if a == "--after-cursor":
            after = _cursor_index(nxt)
            i += 2
            continue
        if a.startswith("--after-cursor="):
            after = _cursor_index(a.split("=", 1)[1])
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a == "--show-cursor":
            show_cursor = True
        elif a.startswith("--unit="):
            names.append(unit_name(a.split("=", 1)[1]))
        elif a in ("-n", "--lines"):
            if nxt.isdigit():
                count = int(nxt)
                i += 2
                continue
            count = 10
        elif a.startswith(("--lines=", "-n")) and a[a.find("=") + 1 if "=" in a else 2:].isdigit():
            count = int(a[a.find("=") + 1 if "=" in a else 2:])
        elif a in ("-o", "--output"):
            cat = nxt == "cat"
            i += 2
            continue
        elif a.startswith("--output="):
            cat = a.endswith("=cat")
        elif a in ("-f", "--follow"):
            follow = True
        elif a in IGNORED_WITH_VALUE:
            i += 2
            continue
        i += 1
    lines: list[str] = []
    for name in names:
        try:
            lines += units.journal(name).read_text().splitlines()
        except OSError:
            pass
    end = len(lines)
    if after is not None:
        lines = lines[after:]
    if count is not None:
        lines = lines[-count:] if count else []
    if not lines and not follow:
        if not quiet:
            print("-- No entries --")
        return 0
    for line in lines:
        print(PREFIX.sub("", line, count=1) if cat else line)
    if show_cursor and not follow:
        print(f"-- cursor: sim;u={','.join(names)};i={end}")
    sys.stdout.flush()
    if follow and names:
        path = units.journal(names[0])
        seen = path.stat().st_size if path.exists() else 0
        try:
            while True:
                time.sleep(0.2)
                if path.exists() and path.stat().st_size > seen:
                    with open(path) as fh:
                        fh.seek(seen)
                        chunk = fh.read()
                        seen = fh.tell()
                    for line in chunk.splitlines():
                        print(PREFIX.sub("", line, count=1) if cat else line, flush=True)
        except KeyboardInterrupt:
            return 0
    return 0


def _cursor_index(cursor: str) -> int:
    """The line position a `sim;…;i=N` cursor names (0 for anything else: a real cursor means nothing here)."""
    for part in cursor.split(";"):
        if part.startswith("i=") and part[2:].isdigit():
            return int(part[2:])
    return 0


def main() -> int:
    return run(sys.argv[1:], CtUnits.from_env())


if __name__ == "__main__":
    sys.exit(main())
