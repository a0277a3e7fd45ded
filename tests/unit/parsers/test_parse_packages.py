"""dpkg-query's answer → the required packages a container lacks."""

from __future__ import annotations

import pytest

from orchestrator.facts import CT_PACKAGES
from orchestrator.parsers import ParseError
from orchestrator.parsers.packages import missing_packages
from tests.shared import fixture

REQUIRED = ("ca-certificates", "curl", "python3", "python3-venv")


def test_all_installed_means_nothing_missing() -> None:
    stdout = "ca-certificates\tinstalled\ncurl\tinstalled\npython3\tinstalled\npython3-venv\tinstalled\n"
    assert missing_packages(REQUIRED, stdout, "", 0) == []


def test_unknown_names_and_removed_packages_are_missing_in_the_order_required() -> None:
    # A stock template: curl was never installed (dpkg has no record), python3-venv was removed (config-files).
    stdout = "ca-certificates\tinstalled\npython3\tinstalled\npython3-venv\tconfig-files\n"
    stderr = "dpkg-query: no packages found matching curl\n"
    assert missing_packages(REQUIRED, stdout, stderr, 1) == ["curl", "python3-venv"]


def test_a_multiarch_name_counts_for_the_package() -> None:
    stdout = "ca-certificates\tinstalled\ncurl\tinstalled\npython3:amd64\tinstalled\npython3-venv\tinstalled\n"
    assert missing_packages(REQUIRED, stdout, "", 0) == []


@pytest.mark.parametrize(("stdout", "stderr", "rc"), [
    ("", "bash: line 1: dpkg-query: command not found", 127),
    ("", "dpkg-query: error: cannot access archive", 1),
    ("garbage without a tab\n", "", 0),
])
def test_output_that_is_not_dpkg_querys_is_an_error(stdout: str, stderr: str, rc: int) -> None:
    with pytest.raises(ParseError):
        missing_packages(REQUIRED, stdout, stderr, rc)


@pytest.mark.parametrize("release", ["debian-12", "debian-13"])
def test_a_bare_debian_12_or_13_template_lacks_all_five_by_the_same_names(release: str) -> None:
    # Real captures (tests/fixtures/README.md): dpkg knows python3 and ca-certificates only as `not-installed`
    # (a Priority record of the minbase set), and has no record of curl, patch (priority optional) or python3-venv;
    # trixie renamed none of them.
    stdout = fixture(f"debian/{release}-bare-dpkg-query.stdout")
    stderr = fixture(f"debian/{release}-bare-dpkg-query.stderr")
    assert missing_packages(CT_PACKAGES, stdout, stderr, 1) == list(CT_PACKAGES)


def test_a_provisioned_debian_13_container_lacks_only_the_toolchain_required_since() -> None:
    # captured before gcc, g++ and python3-dev were required (the real server's first start compiles with them)
    assert missing_packages(CT_PACKAGES, fixture("debian/debian-13-provisioned-dpkg-query.stdout"), "", 0) == \
        ["gcc", "g++", "python3-dev"]
