"""Issue 25 item 5: every --json document, success or failure, has one envelope (docs/json.md), checked here on
real documents against the schema in that page. The hosts point at a closed loopback port: nothing leaves this
machine, and a run that connects fails at once with exit 3."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ERROR_CODES, USAGE_ERROR
from tests.shared import EXAMPLE_INVENTORY, H200_NVLINK

REPO = Path(__file__).resolve().parents[2]
DEV = ["--devices-file", str(H200_NVLINK / "ls-dev-nvidia.txt"),
       "--proc-devices-file", str(H200_NVLINK / "proc-devices.txt")]


def schema() -> dict[str, Any]:
    """The schema block of docs/json.md (the fenced json block under "## Schema")."""
    text = (REPO / "docs" / "json.md").read_text().split("## Schema", 1)[1]
    found = re.search(r"```json\n(.*?)\n```", text, re.S)
    assert found is not None, "docs/json.md has no schema block"
    return json.loads(found.group(1))  # type: ignore[no-any-return]


TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
                                      "integer": (int,), "number": (int, float), "null": (type(None),)}


def problems(value: Any, sch: dict[str, Any], where: str = "$") -> list[str]:
    """A tiny validator for what the envelope's schema uses: type, enum, required, properties, items, minimum."""
    out: list[str] = []
    types = sch.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        ok = any(isinstance(value, TYPES[n]) and not (n in ("integer", "number") and isinstance(value, bool))
                 for n in names)
        if not ok:
            return [f"{where}: {value!r} is not {names}"]
    if "enum" in sch and value not in sch["enum"]:
        out.append(f"{where}: {value!r} not in {sch['enum']}")
    if "minimum" in sch and value < sch["minimum"]:
        out.append(f"{where}: {value!r} < {sch['minimum']}")
    if isinstance(value, dict):
        out += [f"{where}: missing {k!r}" for k in sch.get("required", []) if k not in value]
        for k, sub in sch.get("properties", {}).items():
            if k in value:
                out += problems(value[k], sub, f"{where}.{k}")
    if isinstance(value, list) and "items" in sch:
        for i, item in enumerate(value):
            out += problems(item, sch["items"], f"{where}[{i}]")
    return out


def check(doc: dict[str, Any], exit_code: int) -> dict[str, Any]:
    """`doc` fits the schema, and its ok/exit_code/error agree with the process's exit code."""
    assert problems(doc, schema()) == [], json.dumps(doc, indent=1)[:2000]
    assert doc["exit_code"] == exit_code
    assert doc["ok"] is (exit_code == 0) and (doc["error"] is None) is (exit_code == 0)
    return doc


def deploy(*args: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "DEPLOY_PVE_TOKEN_SECRET": "not-used", "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=REPO,
                         timeout=120, env=env)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not one JSON document (exit {res.returncode}): {res.stdout!r} {res.stderr!r}") from None
    return res.returncode, check(doc, res.returncode)



def test_the_schema_names_every_error_code() -> None:
    enum = schema()["properties"]["error"]["enum"]
    assert set(enum) == {None, USAGE_ERROR, *ERROR_CODES.values()}
    assert all(re.fullmatch(r"[a-z]+(-[a-z]+)*", code) for code in enum if code is not None)


def test_successful_offline_commands() -> None:
    code, doc = deploy("--inventory", str(EXAMPLE_INVENTORY), "render", "pve-gpu-1", *DEV, "--pve-version", "7.4",
                       "--json")
    assert code == 0 and doc["host"] == "pve-gpu-1" and doc["files"]
    code, doc = deploy("--json", "verify-p2p", "--topo-file", str(H200_NVLINK / "topo-m.txt"),
                       "--p2p-read-file", str(H200_NVLINK / "topo-p2p-r.txt"),
                       "--p2p-write-file", str(H200_NVLINK / "topo-p2p-w.txt"))
    assert code == 0 and doc["verdict"]["status"] == "pass"


def test_a_config_error(local_inv: Path) -> None:
    code, doc = deploy("--inventory", str(local_inv), "--json", "up", "host", "pve-gpu-1", "--preset", "quik")
    assert (code, doc["error"]) == (2, "config-error") and "no bench preset 'quik'" in doc["what"]


@pytest.mark.parametrize(("args", "words"), [
    (("--json", "up", "host"), "'host' must be followed by a name"),  # the tool's own: target words
    (("--json", "up", "host", "pve-gpu-1", "--skip-benhc"), "--skip-benhc"),  # click: NoSuchOption
    (("up", "--all", "--parallel", "0", "--json"), "--parallel"),  # click: BadParameter, --json after
    (("--json", "uo", "host", "pve-gpu-1"), "'up'"),  # click: an unknown command, did you mean
])
def test_a_usage_error(local_inv: Path, args: tuple[str, ...], words: str) -> None:
    code, doc = deploy("--inventory", str(local_inv), *args)
    assert (code, doc["error"], doc["steps"], doc["changed"]) == (2, "usage-error", [], False)
    assert words in doc["what"], doc


def test_a_usage_error_without_json_stays_text() -> None:
    res = subprocess.run([sys.executable, "-m", "orchestrator", "up", "--skip-benhc"], capture_output=True,
                         text=True, cwd=REPO, timeout=60)
    assert res.returncode == 2 and res.stdout == "" and "No such option" in res.stderr


def test_a_remote_error_keeps_the_steps_it_ran(local_inv: Path) -> None:
    code, doc = deploy("--inventory", str(local_inv), "--json", "status", "host", "pve-gpu-1")
    assert (code, doc["error"], doc["host"]) == (3, "remote-error", "pve-gpu-1")
    code, doc = deploy("--inventory", str(local_inv), "--json", "up", "host", "pve-gpu-1", "--skip-bench")
    assert (code, doc["error"], doc["host"], doc["playbook"]) == (3, "remote-error", "pve-gpu-1", "up")
    assert doc["steps"] and doc["steps"][-1]["status"] == "failed" and doc["steps"][-1]["name"] == doc["step"]
    assert doc["totals"]["ssh_round_trips"] == 0 and doc["changed"] is False


def test_a_failed_roll_and_a_failed_fleet_have_the_envelope(local_inv: Path) -> None:
    code, doc = deploy("--inventory", str(local_inv), "--json", "roll", "host", "pve-gpu-1", "--set",
                       "chunked-prefill-size=4096", "--skip-bench")
    assert (code, doc["error"], doc["result"], doc["rolled_back_to"]) == (3, "remote-error", "failed", None)
    assert [s["name"] for s in doc["steps"]] == ["connect"] and "ssh_round_trips" in doc["totals"]
    code, doc = deploy("--inventory", str(local_inv), "--json", "up", "--all", "--skip-bench")
    assert (code, doc["error"]) == (3, "remote-error")
    report = check(doc["hosts"][0]["report"], 3)  # each host's report is its single-host document
    assert report["error"] == "remote-error" and report["steps"][-1]["status"] == "failed"
