"""Ctrl-C before a command's body runs (its lazy import, option parsing) exits 130 with one line, as one during the
body does, not with click's "Aborted!" and exit 1 (the code of a failed check). Found by the chaos soak: a SIGINT
1.5 s into `deploy roll group` exited 1."""

from __future__ import annotations

import sys

import click
import pytest

import orchestrator.cli as cli_mod


def test_ctrl_c_during_the_lazy_import_of_a_command_exits_130(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(self: click.Group, ctx: click.Context, name: str) -> click.Command | None:
        raise KeyboardInterrupt  # as if Ctrl-C came while the command's module was being imported

    monkeypatch.setattr(cli_mod.LazyGroup, "get_command", interrupted)
    monkeypatch.setattr(sys, "argv", ["deploy", "status", "host", "sim-1"])
    with pytest.raises(SystemExit) as stop:
        cli_mod.main()
    assert stop.value.code == 130
    err = capsys.readouterr().err
    assert "interrupted (Ctrl-C) before the command started; nothing was changed" in err
    assert "Aborted!" not in err


def test_a_usage_error_keeps_its_own_exit_code(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["deploy", "statsu"])
    with pytest.raises(SystemExit) as stop:
        cli_mod.main()
    assert stop.value.code == 2 and "status" in capsys.readouterr().err  # click's usage error, with a suggestion
