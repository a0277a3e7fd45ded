"""Input the tool must refuse before any remote change (issue 13 §4): duplicate YAML keys, duplicate flags,
oversized flag values, characters a unit file cannot carry; plus version hints (§5) and unknown profile names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.cli.roll_cmd import _flags_file
from orchestrator.errors import ConfigError
from orchestrator.flags import RESERVED_DESTS, FlagSchema, apply_changes, canonicalize, parse_set, rename_hint
from orchestrator.flags.limits import MAX_COMMAND_LINE_CHARS, MAX_VALUE_CHARS, refused_char
from orchestrator.flags.schema import version_key
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import ServerProfile
from orchestrator.local.yamlfile import parse_yaml
from orchestrator.playbooks import load_playbook
from orchestrator.render.service import exec_start, render_unit

REPO = Path(__file__).resolve().parents[3]
OLD = FlagSchema.load("0.5.12.post1")
NEW = FlagSchema.load("0.5.23")


def deploy(*args: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inventory), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**os.environ, "COLUMNS": "100000"})  # no wrapping of the error line


def line_of(path: Path, needle: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln)


# ------------------------------------------------------------------------------------------------ duplicate keys
def test_yaml_loader_names_both_lines_and_the_key() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_yaml("a: 1\nb:\n  vmid: 120\n  vmid: 121\n", "f.yaml")
    assert exc.value.what.startswith("f.yaml: line 4: key 'vmid' is given twice (first on line 3)")
    assert exc.value.exit_code == 2
    # spelled differently, the same key all the same (YAML 1.1 booleans; quoted and plain)
    with pytest.raises(ConfigError, match="line 2: key 'a'"):
        parse_yaml("a: 1\n'a': 2\n", "f.yaml")
    # a merge key may be overridden: that is what `<<:` is for
    assert parse_yaml("base: &b {x: 1}\nc:\n  <<: *b\n  x: 2\n", "f.yaml")["c"] == {"x": 2}
    assert parse_yaml("a: {x: 1}\nb: {x: 1}\n", "f.yaml") == {"a": {"x": 1}, "b": {"x": 1}}


def test_duplicate_vmid_in_a_host_is_refused_with_file_line_and_key(inv: Path) -> None:
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("      vmid: 120\n", "      vmid: 120\n      vmid: 121\n"))
    second = line_of(hosts, "vmid: 121")
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert f"{hosts}: line {second}: key 'vmid' is given twice (first on line {second - 1})" in exc.value.what
    res = deploy("up", "host", "pve-gpu-1", inventory=inv)  # refused before any connection
    assert res.returncode == 2 and "key 'vmid' is given twice" in res.stderr and "Traceback" not in res.stderr


def test_second_host_entry_with_the_same_name_in_one_file(inv: Path) -> None:
    hosts = inv / "hosts.yaml"
    text = hosts.read_text()
    body = text.split("hosts:\n", 1)[1]
    hosts.write_text(text + body.replace("10.1.230.174", "127.0.0.9"))  # the same entry again, other address
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert re.search(r"hosts.yaml: line \d+: key 'pve-gpu-1' is given twice \(first on line \d+\)", exc.value.what)


def test_same_host_in_two_directories_names_both_files_and_lines(inv: Path, tmp_path: Path) -> None:
    other = tmp_path / "site"
    other.mkdir()
    (other / "more.yaml").write_text("# site hosts\n" + (inv / "hosts.yaml").read_text())
    with pytest.raises(ConfigError) as exc:
        load_inventory(f"{inv}:{other}")
    what = exc.value.what
    assert f"{other / 'more.yaml'}: line {line_of(other / 'more.yaml', 'pve-gpu-1:')}" in what
    assert f"already defined in {inv / 'hosts.yaml'}: line {line_of(inv / 'hosts.yaml', 'pve-gpu-1:')}" in what
    # the same directory given twice is one definition, not two
    assert load_inventory(f"{inv}:{inv}").find_host("pve-gpu-1")


def test_duplicate_flag_in_a_profile_exact_and_by_alias(inv: Path) -> None:
    profiles = inv / "profiles.yaml"
    original = profiles.read_text()
    profiles.write_text(original.replace("      max-running-requests: 2048\n",
                                         "      max-running-requests: 2048\n      max-running-requests: 64\n"))
    with pytest.raises(ConfigError, match=r"profiles.yaml: line \d+: key 'max-running-requests' is given twice"):
        load_inventory(inv)
    # two spellings of one sglang flag: tensor-parallel-size and its alias tp-size
    profiles.write_text(original.replace("      tensor-parallel-size: 8\n",
                                         "      tensor-parallel-size: 8\n      tp-size: 4\n"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert f"line {line_of(profiles, 'tp-size: 4')}" in exc.value.what
    assert "'tensor-parallel-size' and 'tp-size' are the same sglang 0.5.12.post1 flag --tensor-parallel-size" \
        in exc.value.what
    res = deploy("plan", "host", "pve-gpu-1", inventory=inv)
    assert res.returncode == 2 and "tp-size" in res.stderr


def test_duplicate_key_in_a_playbook_and_a_flags_file(tmp_path: Path) -> None:
    pb = tmp_path / "mine.yaml"
    pb.write_text("name: mine\nname: other\nsteps: [connect]\n")
    with pytest.raises(ConfigError, match=r"mine.yaml: line 2: key 'name' is given twice"):
        load_playbook(pb, {"connect": object()})
    flags = tmp_path / "flags.yaml"
    flags.write_text("max-running-requests: 1024\nschedule-policy: lpm\nmax-running-requests: 2048\n")
    with pytest.raises(ConfigError, match=r"flags.yaml: line 3: key 'max-running-requests' is given twice"):
        _flags_file(str(flags))


def test_set_given_twice_is_refused_also_under_two_spellings() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_set(["max-running-requests=8", "max-running-requests=16"], OLD)
    assert "is given twice in --set" in exc.value.what
    with pytest.raises(ConfigError) as exc:
        parse_set(["tp=2", "tp-size=4"], OLD)
    assert "(as 'tp' and then 'tp-size'; both are --tensor-parallel-size)" in exc.value.what
    assert parse_set(["tp=2", "max-running-requests=8"], OLD) == {"tp": 2, "max-running-requests": 8}


# ------------------------------------------------------------------------------------------------ limits
def test_value_limit_per_flag_and_for_the_whole_command_line() -> None:
    ok = canonicalize({"chat-template": "x" * MAX_VALUE_CHARS}, OLD)
    assert len(ok.get("chat-template") or "") == MAX_VALUE_CHARS
    with pytest.raises(ConfigError) as exc:
        canonicalize({"chat-template": "x" * 120_000}, OLD)
    assert exc.value.exit_code == 2
    assert "--chat-template: value is 120,000 characters long; the limit is 8,192" in exc.value.what
    assert "xxxxxxxxxx" not in exc.value.what  # the value itself is not echoed back
    # each value under the limit, together over it
    free_text = [s.canonical for s in OLD.specs if s.kind == "value" and s.type in (None, "str")
                 and s.choices is None and s.nargs is None and s.dest not in RESERVED_DESTS][:6]
    many = {name: "y" * (MAX_VALUE_CHARS - 100) for name in free_text}
    assert len(many) == 6 and 6 * (MAX_VALUE_CHARS - 100) > MAX_COMMAND_LINE_CHARS
    with pytest.raises(ConfigError, match="the limit for the whole command line is 32,768"):
        canonicalize(many, OLD)
    # ... also when --set grows a set that was fine
    base = canonicalize(dict(list(many.items())[:3]), OLD)
    with pytest.raises(ConfigError, match="whole command line"):
        apply_changes(base, parse_set([f"{k}={v}" for k, v in list(many.items())[3:]], OLD))
    with pytest.raises(ConfigError, match="120,000 characters"):
        apply_changes(base, parse_set(["chat-template=" + "z" * 120_000], OLD))


def test_inventory_refuses_an_oversized_flag_value_naming_file_and_flag(inv: Path) -> None:
    profiles = inv / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace("      enable-metrics: true\n",
                                                     "      enable-metrics: true\n      chat-template: " +
                                                     "x" * 120_000 + "\n"))
    res = deploy("up", "host", "pve-gpu-1", inventory=inv)
    assert res.returncode == 2
    assert f"{profiles}: line {line_of(profiles, 'chat-template:')}: profiles.glm5-nvfp4.flags: flag " \
           "'chat-template': value is 120,000 characters long; the limit is 8,192" in res.stderr
    assert "fix: shorten the value" in res.stderr and "unknown keys" not in res.stderr


# ------------------------------------------------------------------------------------------------ characters
SPLITTERS = [chr(c) for c in range(0x110000) if len(f"a{chr(c)}b".splitlines()) > 1]


def test_every_line_splitter_and_control_character_is_refused_but_tab() -> None:
    assert {"\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"} == set(SPLITTERS)
    for ch in [*SPLITTERS, "\x00", "\x01", "\x1b", "\x7f", "\x9f"]:
        assert refused_char(f"ab{ch}") == (3, ch), repr(ch)
    assert refused_char("a\tb") is None
    assert refused_char("ünïcödé ✓ 漢字 \u200b") is None  # ordinary text, zero-width space included


@pytest.mark.parametrize(("ch", "label"), [
    ("\u2028", "U+2028 LINE SEPARATOR"), ("\u2029", "U+2029 PARAGRAPH SEPARATOR"), ("\x85", "U+0085 NEXT LINE"),
    ("\x00", "U+0000 NUL"), ("\x0b", "U+000B VERTICAL TAB"), ("\x0c", "U+000C FORM FEED"),
    ("\n", "U+000A LINE FEED (newline)"),
])
def test_refused_character_is_named_with_the_flag(ch: str, label: str) -> None:
    with pytest.raises(ConfigError) as exc:
        canonicalize({"chat-template": f"tmpl{ch}x"}, OLD)
    assert f"--chat-template: value contains {label} at character 5" in exc.value.what
    with pytest.raises(ConfigError, match=re.escape(label)):
        apply_changes(canonicalize({}, OLD), parse_set([f"chat-template=a{ch}"], OLD))
    with pytest.raises(ValueError, match=re.escape(f"flag 'chat-template': value contains {label}")):
        profile(flags={"chat-template": f"tmpl{ch}x"})
    with pytest.raises(ValueError, match=re.escape(label)):  # list items too
        profile(flags={"cuda-graph-bs": [1, f"2{ch}"]})


def profile(**over: object) -> ServerProfile:
    base: dict[str, object] = {"model_path": "/models/m", "served_model_name": "m", "sglang_version": "0.5.12.post1"}
    return ServerProfile.model_validate({**base, **over})


def systemd_words(value: str) -> list[str]:
    """ExecStart= split as systemd does for a quoted word: `\\t`, `\\n`, `\\\\`, `\\"` unescaped inside "..."
    (extract_first_word with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE); `%%` and `$$` undone."""
    words: list[str] = []
    i, cur, quoted, have = 0, "", False, False
    escapes = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", '"': '"', "'": "'", "s": " "}
    while i < len(value):
        c = value[i]
        if c == "\\" and i + 1 < len(value):
            cur, have, i = cur + escapes[value[i + 1]], True, i + 2
            continue
        if c == '"':
            quoted, have = not quoted, True
        elif c in " \t\n" and not quoted:
            if have:
                words.append(cur)
            cur, have = "", False
        else:
            cur, have = cur + c, True
        i += 1
    if have:
        words.append(cur)
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def test_tab_passes_the_unit_literally_while_the_unit_stays_one_line_per_flag() -> None:
    """TAB is allowed: the renderer writes it as the escape \\t inside quotes, and systemd gives the TAB back."""
    prof = profile(flags={"chat-template": "a\tb c"})
    flags = canonicalize(prof.flags, OLD)
    unit = render_unit(prof, flags).content
    assert "\t" not in unit
    line = next(ln for ln in unit.splitlines() if "--chat-template" in ln)
    assert line.strip().removesuffix(" \\") == '--chat-template "a\\tb c"'
    joined = exec_start(prof, flags).replace(" \\\n    ", " ")
    words = systemd_words(joined)
    assert words[words.index("--chat-template") + 1] == "a\tb c"
    # a newline would be escaped the same way (one unit line), but is refused before it gets there
    with pytest.raises(ConfigError, match="U\\+000A"):
        canonicalize({"chat-template": "a\nb"}, OLD)


# ------------------------------------------------------------------------------------------------ version hints
def test_version_order() -> None:
    assert version_key("0.5.12.post1") < version_key("0.5.23")
    assert version_key("0.5.12") < version_key("0.5.12.post1") < version_key("0.5.13rc1") < version_key("0.5.13")


def test_flag_only_in_the_newer_release_used_against_the_older_one() -> None:
    hint = rename_hint(OLD, "--cuda-graph-max-bs-decode")
    assert "removed" not in hint
    assert hint.startswith("--cuda-graph-max-bs-decode was added in sglang 0.5.23")
    assert "use --cuda-graph-max-bs" in hint
    assert rename_hint(OLD, "--dsa-decode-backend") == (
        "--dsa-decode-backend is the sglang 0.5.23 name; 0.5.12.post1 calls it --nsa-decode-backend? "
        "(or pin sglang_version 0.5.23 to use it)")
    grpc = rename_hint(OLD, "--grpc-port")
    assert grpc.startswith("--grpc-port was added in sglang 0.5.23; 0.5.12.post1 does not have it")
    with pytest.raises(ConfigError) as exc:
        canonicalize({"cuda-graph-max-bs-decode": 64}, OLD)
    assert "was added in sglang 0.5.23" in exc.value.what and "removed" not in exc.value.what


def test_flag_only_in_the_older_release_used_against_the_newer_one() -> None:
    assert rename_hint(NEW, "--enable-nan-detection") == (
        "--enable-nan-detection exists in sglang 0.5.12.post1 but was removed in 0.5.23")
    assert rename_hint(NEW, "--nsa-decode-backend") == (
        "renamed to --dsa-decode-backend in 0.5.23? (--nsa-decode-backend exists in sglang 0.5.12.post1)")
    assert "split into --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill" in rename_hint(
        NEW, "--cuda-graph-max-bs")


# ------------------------------------------------------------------------------------------------ profile names
def test_unknown_profile_name_lists_known_and_suggests_the_closest(inv: Path) -> None:
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("profile: glm5-nvfp4", "profile: glm5-nvfp"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    err = exc.value
    assert f"{hosts}: line {line_of(hosts, 'profile: glm5-nvfp')}" in err.what
    assert "unknown profile 'glm5-nvfp' (known profiles: glm5-nvfp4)" in err.what
    assert err.fix.startswith("did you mean 'glm5-nvfp4'? set profile: to one of the known profiles")
    assert "unknown keys" not in err.fix
    res = deploy("status", "host", "pve-gpu-1", inventory=inv)
    assert res.returncode == 2 and "did you mean 'glm5-nvfp4'?" in res.stderr


def test_unknown_preset_name_suggests_the_closest(inv: Path) -> None:
    profiles = inv / "profiles.yaml"
    profiles.write_text(profiles.read_text().replace("bench_preset: seed-1024x256", "bench_preset: seed-1024x265"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert "unknown preset 'seed-1024x265'" in exc.value.what and "did you mean 'seed-1024x256'?" in exc.value.fix


# ------------------------------------------------------------------------------------------------ alias bombs
def alias_bomb(levels: int = 9) -> str:
    text = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    prev = "a"
    for name in "bcdefghijk"[:levels - 1]:
        text += f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
        prev = name
    return text


def test_the_yaml_loader_refuses_an_alias_bomb_without_expanding_it() -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"f.yaml: refused: its aliases expand to more than 100,000 nodes"):
        parse_yaml(alias_bomb(), "f.yaml")
    assert time.monotonic() - started < 1.0
    # Ordinary anchors and merge keys still load.
    assert parse_yaml("x: &x {a: 1}\ny: *x\nz:\n  <<: *x\n  b: 2\n", "f.yaml")["z"] == {"a": 1, "b": 2}


def test_roll_flags_file_alias_bomb_is_refused_before_any_connection(inv: Path, tmp_path: Path) -> None:
    """Issue 21 §10: the same loader as the inventory, before the SSH connect (the host here is loopback with a
    closed port: a run that got as far as connecting would report it unreachable instead)."""
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("address: 10.1.230.174", "address: 127.0.0.254")
                     .replace("example: true", "example: false")
                     .replace("port: 22\n", "port: 9\n", 1))
    bomb = tmp_path / "flags.yaml"
    bomb.write_text("flags:\n  " + alias_bomb().replace("\n", "\n  ").rstrip() + "\n  max-running-requests: *i\n")
    started = time.monotonic()
    res = deploy("roll", "host", "pve-gpu-1", "--flags", str(bomb), inventory=inv)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "refused: its aliases expand to more than 100,000 nodes" in res.stderr and "Traceback" not in res.stderr
    assert time.monotonic() - started < 30
