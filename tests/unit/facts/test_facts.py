"""Typed facts: one object per fact (name, command, parser), looked up by object so a typo is a mypy error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import RemoteError
from orchestrator.facts import CT, CT_FACTS, HOST, HOST_FACTS, CtFact, Facts, HostFact
from orchestrator.inventory.loader import load_inventory
from orchestrator.releases.documents import ReleaseMeta
from orchestrator.remote.batch import CommandOutput, build_batch_script, new_nonce, split_batch_output
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def facts() -> Facts:
    inv = load_inventory(EXAMPLE_INVENTORY)
    host = inv.hosts["pve-gpu-1"]
    return Facts(None, host, inv.profile_for(host))  # type: ignore[arg-type]  # nothing is gathered here


def test_each_fact_is_named_as_its_attribute_and_names_are_unique() -> None:
    for ns, table, kind in ((HOST, HOST_FACTS, HostFact), (CT, CT_FACTS, CtFact)):
        attrs = {a: f for a, f in vars(ns).items() if isinstance(f, kind)}
        assert attrs and {a: f.name for a, f in attrs.items()} == {a: a for a in attrs}
        assert table == attrs


def test_get_parses_and_says_what_is_unknown(facts: Facts) -> None:
    facts.host = {"ct_status": CommandOutput(0, "status: running\n", "")}
    facts.ct = {"current_meta": CommandOutput(0, '{"release": "r1"}', ""),
                "current_verdict": CommandOutput(1, "", "cat: no such file\n")}
    assert facts.get(HOST.ct_status) == "running"
    assert facts.get(CT.current_meta) == ReleaseMeta.model_validate({"release": "r1"})  # typed; unknown keys kept
    assert facts.get(CT.current_verdict) is None  # the file is not there
    assert facts.get(CT.active) is None  # not read: container not running
    assert facts.find(HOST.gpu_power) is None  # not read by this run
    with pytest.raises(KeyError):
        facts.get(HOST.gpu_power)  # a host fact a step reads must be named in its host_facts=


def test_a_misspelt_or_string_fact_is_a_type_error(tmp_path: Path) -> None:
    snippet = tmp_path / "typo.py"
    snippet.write_text("from orchestrator.facts import CT, HOST, Facts\n\n\n"
                       "def read(facts: Facts) -> None:\n"
                       "    facts.get(HOST.driver_verison)\n"
                       "    facts.get(\"driver_version\")\n"
                       "    meta: str = facts.get(CT.current_meta)\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
                          cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'typo.py:5: error: "type[HOST]" has no attribute "driver_verison"' in proc.stdout
    assert "typo.py:6: error: No overload variant" in proc.stdout
    assert "typo.py:7: error:" in proc.stdout


def test_create_only_facts_cost_no_program_start_once_the_ct_exists(facts: Facts) -> None:
    """The appliance index and the storage's templates matter only for a CT to create: once its config file exists
    they print nothing, and the test for that is the shell's, not a second `pct status` (a Perl program)."""
    h, p = facts.host_cfg, facts.profile
    for fact in (HOST.aplinfo, HOST.templates):
        assert fact.command(h, p).startswith("test -e /etc/pve/lxc/120.conf || pvesh get /nodes/pve-gpu-1/")
    assert [f.name for f in HOST_FACTS.values() if "pct " in f.command(h, p)] == ["ct_status"]


class LocalNode:
    """The batch surface of SshHost on this machine's bash: the real script text, run for real."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.scripts: list[str] = []

    def batch(self, commands: dict[str, str], *, timeout: float | None = None,
              what: str = "") -> dict[str, CommandOutput]:
        nonce = new_nonce()
        script = build_batch_script(commands, nonce)
        self.scripts.append(script)
        proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, env=self.env,
                              timeout=60, check=False)
        return split_batch_output(proc.stdout, nonce)


#: `pct` on a node whose CT 120 is in state $CT_STATE ("missing": no config): `status` as pct prints it, `exec`
#: runs the command here. Each call is logged, so the test counts program starts.
FAKE_PCT = """#!/bin/sh
echo "$*" >> "$PCT_LOG"
case "$1" in
  status) [ "$CT_STATE" = missing ] && { echo "Configuration file 'nodes/n/lxc/120.conf' does not exist" >&2; exit 2; }
          echo "status: $CT_STATE" ;;
  exec) shift 3; TMPDIR=${CT_TMPDIR:-${TMPDIR:-/tmp}} exec "$@" ;;
esac
"""


def local_node(facts: Facts, tmp_path: Path, **env: str) -> Path:
    """Point `facts` at this machine's bash with FAKE_PCT on PATH; the path of pct's call log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("pct", FAKE_PCT), ("systemctl", "#!/bin/sh\necho running\n")):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "pct.log"
    node = LocalNode({"PATH": f"{bin_dir}:/usr/bin:/bin", "PCT_LOG": str(log), **env})
    facts.ssh = node  # type: ignore[assignment]  # the batch surface only
    facts.container.node = node  # type: ignore[assignment]
    return log


@pytest.mark.parametrize("state", ["running", "stopped", "missing"])
def test_one_pct_status_answers_the_status_fact_and_guards_the_container_batch(
        facts: Facts, tmp_path: Path, state: str) -> None:
    """`pct status` is a Perl program on a node: a round trip that reads the CT's status and its inside starts it
    once, and HOST.ct_status still comes back as that command's own answer."""
    log = local_node(facts, tmp_path, CT_STATE=state)
    facts.gather((HOST.ct_status, HOST.cmdline), (CT.releases, CT.current_release))
    calls = log.read_text().splitlines()
    assert [c for c in calls if c.startswith("status")] == ["status 120"]
    assert facts.get(HOST.ct_status) == (None if state == "missing" else state)
    assert facts.host["ct_status"].rc == (2 if state == "missing" else 0)
    assert facts.ct_running is (state == "running")
    if state == "running":
        assert [c for c in calls if c.startswith("exec")] == [calls[1]]
        assert {"releases", "current_release"} <= set(facts.ct)  # both read (no release yet: empty values)
    else:
        assert len(calls) == 1 and facts.get(CT.releases) is None
    # without container facts the status is its own command, as before
    log.unlink()
    facts.gather((HOST.ct_status,), ())
    assert log.read_text().splitlines() == ["status 120"]
    assert facts.get(HOST.ct_status) == (None if state == "missing" else state)


def test_the_sglang_version_is_read_from_pips_record_without_starting_python(facts: Facts, tmp_path: Path) -> None:
    """`import sglang` costs seconds on a node; the dist-info header names the same release. Only the header is
    read, a similarly named package does not count, and no sglang is no version (the step installs)."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "sglang-0.5.12.post1.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.12.post1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.12.post1\n\nVersion: 9.9 (in the long description)\n")
    (site / "sglang_router-0.2.1.dist-info").mkdir()
    (site / "sglang_router-0.2.1.dist-info" / "METADATA").write_text("Name: sglang-router\nVersion: 0.2.1\n")
    profile = facts.profile.model_copy(update={"venv": f"{tmp_path}/venv/"})
    command = CT.sglang_version.command(facts.host_cfg, profile)
    assert "python" not in command.split("/lib/")[0]
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
    assert (run.returncode, run.stdout) == (0, "0.5.12.post1\n")
    profile = facts.profile.model_copy(update={"venv": f"{tmp_path}/no-venv"})
    run = subprocess.run(["bash", "-c", CT.sglang_version.command(facts.host_cfg, profile)],
                         capture_output=True, text=True, check=False)
    assert run.returncode != 0 and run.stdout == ""


def test_a_full_container_disk_is_an_error_that_says_so(facts: Facts, tmp_path: Path, full_tmpdir: Path) -> None:
    """The container's batch cannot write its files: its facts would read as commands that printed nothing (no
    sglang, no release, weights absent), and `up` would act on that. It is an error naming the disk instead."""
    local_node(facts, tmp_path, CT_STATE="running", CT_TMPDIR=str(full_tmpdir))
    with pytest.raises(RemoteError) as err:
        facts.gather((HOST.ct_status, HOST.cmdline), (CT.releases, CT.sglang_version))
    assert "CT 120 could not run its facts batch: could not write its files in" in err.value.what
    assert "no space left?" in err.value.what and "df -h /tmp" in (err.value.fix or "")
    assert facts.ct == {} and not facts.ct_running


def test_a_container_that_stops_between_the_status_and_the_exec_is_an_error_with_pcts_words(
        facts: Facts, tmp_path: Path) -> None:
    """`pct status` said running, then `pct exec` found it stopped: PVE's own words, not an internal ParseError."""
    log = local_node(facts, tmp_path, CT_STATE="running")
    pct = tmp_path / "bin" / "pct"
    pct.write_text(FAKE_PCT.replace('  exec) shift 3;', '  exec) echo "CT 120 not running" >&2; exit 255;'))
    with pytest.raises(RemoteError) as err:
        facts.gather((HOST.ct_status,), (CT.releases,))
    assert err.value.what.startswith("CT 120's facts came back cut short (exit 255, 'CT 120 not running'; ")
    assert log.read_text().splitlines()[0] == "status 120" and not facts.ct_running


def test_a_doctor_check_whose_read_failed_is_a_warn_row_not_a_missing_row(facts: Facts) -> None:
    """pveversion or lspci exiting non-zero used to drop its row from doctor's table (in-process doctor flake)."""
    from orchestrator.steps.host import host_facts, unread_findings
    from orchestrator.verdicts.host import doctor_findings

    facts.host = {"pveversion": CommandOutput(127, "", "bash: pveversion: command not found\n"),
                  "lspci_acs": CommandOutput(1, "", "lspci: Unable to load libkmod resources\n"),
                  "cmdline": CommandOutput(0, "BOOT_IMAGE=/vmlinuz iommu=pt\n", "")}
    findings = doctor_findings(host_facts(facts))
    assert {"pve-version", "acs-redirect"}.isdisjoint(f.check for f in findings)
    rows = {f.check: f for f in unread_findings(facts, findings)}
    assert set(rows) == {"pve-version", "acs-redirect"}  # iommu read fine; the others were not read at all
    assert rows["pve-version"].status == "warn" and "exit 127: bash: pveversion: command not found" in \
        rows["pve-version"].observed
    assert "Unable to load libkmod" in rows["acs-redirect"].observed and "pciutils" in rows["acs-redirect"].fix
    facts.host["pveversion"] = CommandOutput(0, "", "")
    assert "it printed nothing" in {f.check: f for f in unread_findings(facts, [])}["pve-version"].observed
    assert facts.failed_read(HOST.cmdline) is None and facts.failed_read(HOST.topo) is None  # fine / not read
