"""The docs' console-block checker (tests/docs_console.py) must catch a page that no longer shows what runs."""

from __future__ import annotations

import pytest

from tests.docs_console import console_blocks, normalize, shape_mismatch

PAGE = """intro
```console
$ deploy up host sim-70 --preset quick
          ok  connect          root@127.0.0.71:2222  (0.04 s, 0 ssh)
apt-get install curl in CT 120
...
     changed  ct_packages      installed curl  (26.32 s, 3 ssh)
...
changed on sim-70: 78.4 s, 22 SSH round trips (18 before smoke), 1 connection, 8 API calls
$ deploy status host sim-70
host sim-70: release 20261201T180841-55ed1bbb (kept, up, 2026-12-01T18:08:41+00:00), sglang active, /health 200
```
```sh
deploy up host 10.1.230.174
```
"""

REAL = """          ok  connect          root@127.0.0.141:2222  (0.10 s, 0 ssh)
apt-get install curl in CT 120
  apt: Reading package lists...
     changed  ct_packages      installed curl  (30.01 s, 3 ssh)
          ok  smoke  answer
changed on sim-140: 91.2 s, 22 SSH round trips (18 before smoke), 1 connection, 8 API calls
"""


def test_blocks_are_split_into_commands_and_only_console_blocks_count() -> None:
    (block,) = console_blocks(PAGE, "p.md")
    assert block.line == 2 and [c.command for c in block.commands] == ["deploy up host sim-70 --preset quick",
                                                                       "deploy status host sim-70"]
    assert block.commands[0].shown[-1].startswith("changed on sim-70")


def test_numbers_ids_and_times_do_not_count() -> None:
    assert normalize("release 20261201T180841-55ed1bbb (kept, up, 2026-12-01T18:08:41+00:00)") == \
        "release <release> (kept, up, <time>)"
    assert normalize("  ok   lock   lock taken (run r-20261201-180303-61b3)") == "ok lock lock taken (run <run>)"


def test_the_same_shape_passes_and_a_changed_status_fails() -> None:
    shown = console_blocks(PAGE, "p.md")[0].commands[0].shown
    assert shape_mismatch(shown, REAL) is None
    assert shape_mismatch(shown, REAL.replace("changed  ct_packages", "ok  ct_packages")) == (
        "not in the output (after line 2): 'changed ct_packages installed curl (N s, N ssh)'")
    assert shape_mismatch(shown, REAL.replace("changed on", "no changes on")) is not None


def test_a_line_left_out_without_a_gap_fails() -> None:
    shown = console_blocks(PAGE, "p.md")[0].commands[0].shown
    assert shape_mismatch([shown[0], shown[3]], REAL) == ("expected 'changed ct_packages installed curl (N s, N ssh)', "
                                                          "got 'apt-get install curl in CT N'")


def test_a_shown_line_the_output_lacks_fails() -> None:
    assert shape_mismatch(["          ok  throughput  quick"], REAL) is not None


def test_an_unclosed_block_is_refused() -> None:
    with pytest.raises(ValueError, match="never closed"):
        console_blocks("```console\n$ deploy\n", "p.md")
