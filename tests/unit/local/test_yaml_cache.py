"""The decoded-YAML cache (orchestrator/yamlcache.py): right by construction, private, never a secret."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.local import yamlcache as yaml_cache
from orchestrator.local import yamlfile

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def decoding_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str, source: str) -> None:
        raise AssertionError("decoded again")

    monkeypatch.setattr(yamlfile, "decode_yaml", refuse)


def test_a_text_decoded_once_comes_from_the_cache(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "hosts:\n  a: {vmid: 120, tags: [x, y], ratio: 0.5, enabled: true, none: null}\n"
    first = yamlfile.parse_yaml(text, "t.yaml")
    (entry,) = (state / "cache" / "yaml").iterdir()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE((state / "cache").stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    decoding_refused(monkeypatch)
    assert yamlfile.parse_yaml(text, "t.yaml") == first
    with pytest.raises(AssertionError, match="decoded again"):  # another text is decoded: the key is the content
        yamlfile.parse_yaml(text + "more: 1\n", "t.yaml")


@pytest.mark.parametrize("text", [
    "profile: {api_key: sk-abcdefghijklmnopqrstuvwx}\n",  # a secret by its key
    "when: 2026-01-02\n",  # a date: JSON would give a string back
    "{1: a}\n",  # a non-string key
    "s: !!set {a, b}\n",
    "x: .nan\n",
])
def test_what_json_cannot_give_back_or_a_secret_is_never_stored(state: Path, text: str) -> None:
    yamlfile.parse_yaml(text, "t.yaml")
    assert not (state / "cache" / "yaml").exists() or not any((state / "cache" / "yaml").iterdir())


def test_an_error_is_the_decoders_every_time(state: Path) -> None:
    text = "a: 1\na: 2\n"
    for _ in range(2):
        with pytest.raises(ConfigError, match="given twice"):
            yamlfile.parse_yaml(text, "t.yaml")


def test_a_broken_entry_is_decoded_again(state: Path) -> None:
    text = "a: [1, 2]\n"
    yamlfile.parse_yaml(text, "t.yaml")
    yaml_cache.entry_path(text).write_text("{not json")
    assert yamlfile.parse_yaml(text, "t.yaml") == {"a": [1, 2]}


def test_a_warm_inventory_load_does_not_import_pyyaml(tmp_path: Path, state: Path) -> None:
    """The inventory, the `up` playbook and the shipped files decoded once: the next process loads no PyYAML."""
    example = str(REPO / "orchestrator" / "examples" / "inventory")
    code = ("import sys; from orchestrator.inventory.loader import load_inventory; "
            "from orchestrator.playbooks import load_playbook; from orchestrator.hardware.catalog import load_catalog;"
            f" from orchestrator.steps import load_all_steps; load_inventory({example!r}); "
            "load_catalog(); load_playbook('up', load_all_steps()); print('yaml' in sys.modules)")
    env = {"DEPLOY_STATE_DIR": str(state), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=120) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr[-2000:] for r in runs]
