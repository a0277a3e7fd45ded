"""Property: any flag value either reaches the server's argv literally through the tool's rendered unit and a
real systemd 252 (in a real container of the lxc runtime), or the tool refuses it with a clear ConfigError before
anything changes. The server is a sh script that records its argv, one file per argument."""

from __future__ import annotations

import base64
import shlex
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.loader import _validation_error
from orchestrator.inventory.models import ServerProfile
from orchestrator.render import render_unit
from orchestrator.render.service import ENV_PATH, UNIT_PATH, launch_argv
from tests.sim.conftest import Ssh
from tests.sim.lxc_support import create_and_start, lxc_host

# 600 s: the first module on a fresh machine also builds the template (debootstrap, ~3 min on 2 busy cores)
pytestmark = pytest.mark.timeout(600)

VENV = "/opt/argv"
#: Stands in for the venv's python: records "$@" as files 1..N, then moves the directory into place at once.
DUMPER = """#!/bin/sh
rm -rf /run/argv.tmp && mkdir /run/argv.tmp && i=0
for a in "$@"; do i=$((i+1)); printf '%s' "$a" > /run/argv.tmp/$i; done
mv /run/argv.tmp /run/argv.d
"""
#: One round trip per example: install the unit, reload, start, wait for the argv, print it base64 per line.
RUN = (f"rm -rf /run/argv.d && cat > {UNIT_PATH} && systemctl daemon-reload && systemctl reset-failed "
       "sglang.service 2>/dev/null; systemctl start sglang.service && i=0; while [ ! -d /run/argv.d ] && "
       "[ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; n=$(ls /run/argv.d | wc -l); j=1; "
       "while [ $j -le $n ]; do base64 -w0 /run/argv.d/$j; echo; j=$((j+1)); done")
SCHEMA = FlagSchema.load("0.5.12.post1")

# Characters systemd, the shell and YAML treat specially, and a few that are merely non-ASCII.
SPECIAL = "\"'$%\\ ;{}`*?~#=\t\n\r\f\v\u2028\u2029\u0085\x7f\x01éü✓漢"
values = st.text(alphabet=st.sampled_from(SPECIAL) | st.characters(codec="utf-8", exclude_characters="\x00"),
                 min_size=1, max_size=24)


@pytest.fixture(scope="module")
def ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ssh]:
    with lxc_host(tmp_path_factory, "lxc-quoting") as (_root, _info, ssh):
        create_and_start(ssh, 120)
        setup = (f"mkdir -p {VENV}/bin /etc/sglang && cat > {VENV}/bin/python && chmod 755 {VENV}/bin/python && "
                 f": > {ENV_PATH}")
        res = ssh.run(f"pct exec 120 -- sh -c {shlex.quote(setup)}", stdin=DUMPER)
        assert res.rc == 0, res.err
        yield ssh


def _profile(name: str, template: str) -> ServerProfile:
    try:
        return ServerProfile.model_validate({
            "model_path": "/models/m", "served_model_name": name, "sglang_version": "0.5.12.post1", "venv": VENV,
            "flags": {"tp": 8, "chat-template": template}})
    except ValidationError as exc:
        raise _validation_error(exc, {}, []) from None  # what load_inventory turns it into


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=False)
@given(name=values, template=values)
@example(name="0", template="-")  # a value starting with '-' is rendered `--chat-template=-` (found by this test)
def test_flag_values_reach_argv_literally_or_are_refused(ssh: Ssh, name: str, template: str) -> None:
    try:
        prof = _profile(name, template)
        flags = canonicalize(prof.flags, SCHEMA)
        unit = render_unit(prof, flags).content
    except ConfigError as exc:
        text = str(exc) + " " + (exc.fix or "")
        assert any(w in text for w in ("served_model_name", "chat-template", "newline", "U+")), text
        event("refused")
        return  # refused before any remote change: nothing is sent
    event("sent through systemd")
    res = ssh.run(f"pct exec 120 -- sh -c {shlex.quote(RUN)}", stdin=unit, timeout=60)
    assert res.rc == 0, res.err
    got = [base64.b64decode(line).decode() for line in res.out.splitlines()]
    assert got == launch_argv(prof, flags)[1:]
    assert value_of(got, "--served-model-name") == name and value_of(got, "--chat-template") == template


def value_of(argv: list[str], opt: str) -> str:
    """An option's value as argparse reads it: the next argument, or after `=` where it starts with '-'."""
    for i, arg in enumerate(argv):
        if arg == opt:
            return argv[i + 1]
        if arg.startswith(opt + "="):
            return arg[len(opt) + 1:]
    raise AssertionError(f"{opt} not in {argv}")
