"""A stack build's progress: pip's lines (pip 23.0.1, Debian 12's venv pip, no terminal, `--progress-bar off`)
with the packages and bytes so far in front, and the venv's bytes while pip unpacks in silence."""

from __future__ import annotations

from orchestrator.remote.channel import LatestLine
from orchestrator.stacks.pip_progress import PipProgress
from orchestrator.stacks.stack import PROGRESS_EVERY_S, Stack, build_command

#: What pip 23.0.1 prints for a locked install from the host's index (one cached wheel, two downloaded).
PIP_LINES = [
    "Looking in indexes: http://10.140.8.2:3141/real/simple",
    "Collecting torch==2.11.0",
    "  Downloading http://10.140.8.2:3141/real/files/torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl (530.6 MB)",
    "Collecting aiohttp==3.14.5",
    "  Using cached http://10.140.8.2:3141/real/files/aiohttp-3.14.5-cp311-cp311-manylinux_2_17_x86_64.whl (1.7 MB)",
    "Collecting idna==3.10",
    "  Downloading http://10.140.8.2:3141/real/files/idna-3.10-py3-none-any.whl (70 kB)",
    "Installing collected packages: idna, aiohttp, torch",
    "deploy-progress: venv 4123456789 bytes",
]


def shown_lines(progress: PipProgress, lines: list[str]) -> list[str]:
    """Every line observed, each shown (the channel shows only some: the counts must not depend on which)."""
    out = []
    for line in lines:
        progress.observe(line)
        out.append(progress.line(line))
    return out


def test_each_line_carries_the_packages_and_bytes_so_far() -> None:
    progress = PipProgress(total=3)
    shown = shown_lines(progress, PIP_LINES)
    assert shown[2].startswith("[1/3 packages, 530.6 MB downloaded] Downloading ")
    assert shown[4].startswith("[2/3 packages, 530.6 MB downloaded, 1.7 MB from pip's cache] Using cached")
    assert shown[7].startswith("[3/3 packages, 530.7 MB downloaded, 1.7 MB from pip's cache, installing 3] "
                               "Installing collected packages")
    assert shown[8] == ("[3/3 packages, 530.7 MB downloaded, 1.7 MB from pip's cache, installing 3] the venv holds "
                        "4.1 GB so far")
    assert progress.fetched_bytes == 530_600_000 + 70_000


def test_an_unlocked_build_counts_without_a_total() -> None:
    progress = PipProgress()
    (shown,) = shown_lines(progress, ["Collecting sglang==0.5.12.post1"])
    assert shown == "[1 packages, 0 B downloaded] Collecting sglang==0.5.12.post1"


def test_the_build_prints_the_venv_bytes_while_pip_runs_and_keeps_pips_exit() -> None:
    stack = Stack("sglang==0.5.12.post1", "0.5.12.post1")
    cmd = build_command(stack, stack.venv)
    assert f"while sleep {PROGRESS_EVERY_S} >/dev/null 2>&1; do " in cmd
    assert f"echo \"deploy-progress: venv $(du -sb {stack.venv} 2>/dev/null | cut -f1) bytes\"; done ) & w=$!" in cmd
    assert "rc=$?; kill $w 2>/dev/null; wait $w 2>/dev/null; (exit $rc); }" in cmd
    assert cmd.endswith(f"|| {{ rc=$?; rm -rf {stack.venv}; exit $rc; }}")


def test_the_channel_hands_every_line_to_the_counter_and_only_some_to_the_screen() -> None:
    progress, said = PipProgress(total=3), []
    tap = LatestLine(lambda line: said.append(progress.line(line)), every_s=60.0, each_line=progress.observe)
    text = "\n".join(PIP_LINES) + "\n"
    for i in range(0, len(text), 7):  # chunks that cut lines in two
        tap(text[i:i + 7].encode())
    assert len(said) == 1  # one line shown in the minute
    assert (progress.collected, progress.fetched_bytes, progress.installing) == (3, 530_670_000, 3)
