"""The fake node answers only what a test declared: an undeclared command fails the test and names itself."""

from __future__ import annotations

import pytest


def test_an_undeclared_command_fails_the_test_naming_it(make_run) -> None:
    run = make_run({}, {})
    with pytest.raises(AssertionError, match=r"no answer for this run \(apt\).*\napt-get -y install curl"):
        run.node.run("apt-get -y install curl", what="apt")
    run.node.succeed("apt-get")
    assert run.node.run("apt-get -y install curl", what="apt").rc == 0
