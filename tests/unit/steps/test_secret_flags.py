"""Secret server flags (issue 21 §1): one rule (the schema or the profile marks a flag secret, plus the API key),
and such a flag is handled as the API key is: in the 0600 secrets.yaml sglang reads with `--config`, never in argv,
the unit, flags.json/meta.json, a diff or output; the next release takes its value from that file, never from
redacted evidence."""

from __future__ import annotations

import base64
import json
import re

import pytest
import yaml

from orchestrator.engine.state import RollRequest, RunInputs
from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.models import ServerProfile
from orchestrator.redact import REDACTED, SECRET_REF
from orchestrator.render.bundle import render_bundle
from orchestrator.render.service import launch_argv, secret_flags
from tests.unit.steps.test_server_steps import CURRENT, PREVIOUS, releases_accepted

SCHEMA = FlagSchema.load("0.5.12.post1")
ADMIN = "adm-0123456789abcdef"


def written(script: str, rid: str, name: str) -> str:
    m = re.search(rf"base64 -d > /var/lib/deploy/releases/{rid}.partial/{name} <<'DEPLOY_B64_EOF'\n(.*?)\n"
                  r"DEPLOY_B64_EOF", script, re.DOTALL)
    assert m, f"{name} of {rid} is not written"
    return base64.b64decode(m.group(1)).decode()


def test_the_schema_marks_secret_text_flags_but_not_figures_named_like_them() -> None:
    for version in FlagSchema.known_versions():
        marked = {s.dest for s in FlagSchema.load(version).specs if s.secret}
        assert marked == {"admin_api_key", "api_key", "ssl_keyfile_password"}, version


def test_a_secret_flag_goes_to_secrets_yaml_not_to_argv_or_the_unit(inventory) -> None:
    host = inventory.hosts["pve-gpu-1"]
    prof: ServerProfile = inventory.profile_for(host).model_copy(update={"api_key": None,
                                                                         "secret_flags": ["tokenizer-path"]})
    flags = canonicalize({**prof.flags, "admin-api-key": ADMIN, "tokenizer-path": "/secret/tok-path"}, SCHEMA)
    assert secret_flags(prof, flags) == {"admin-api-key", "tokenizer-path"}
    bundle = render_bundle(host, prof, flags=flags)
    unit = bundle.file("sglang.service").content
    secrets_yaml = bundle.file("secrets.yaml")
    assert ADMIN not in unit and "/secret/tok-path" not in unit and "--config /etc/sglang/secrets.yaml" in unit
    assert secrets_yaml.mode == 0o600
    assert yaml.safe_load(secrets_yaml.content) == {"admin-api-key": ADMIN, "tokenizer-path": "/secret/tok-path"}
    assert "SGLANG_LOGGING_CONFIG_PATH" in unit and bundle.file("logging.json")  # sglang's argument dump held back
    argv = launch_argv(prof, flags)
    assert ADMIN not in argv and argv[argv.index("--config") + 1] == "/etc/sglang/secrets.yaml"
    check = launch_argv(prof, flags, api_key="placeholder")  # validation in the container: placeholders only
    assert ADMIN not in check and check[check.index("--admin-api-key") + 1] == "placeholder"


def test_redacted_evidence_is_never_a_flag_value() -> None:
    for value in (REDACTED, SECRET_REF):
        with pytest.raises(ConfigError, match="withheld secret"):
            canonicalize({"admin-api-key": value}, SCHEMA)


def roll_run(make_run, stored: dict, *, secrets_yaml: str | None, sets: tuple[str, ...]):
    run = make_run({}, {"releases": f"{PREVIOUS}\n{CURRENT}\n", "current_release": f"releases/{CURRENT}\n",
                        "current_flags": json.dumps(stored), "sglang_version": "0.5.12.post1\n"},
                   skip_bench=True, inputs=RunInputs(roll=RollRequest(set=sets)))
    if secrets_yaml is not None:
        run.node.answer("/var/lib/deploy/current/secrets.yaml", secrets_yaml)
    else:
        run.node.answer("/var/lib/deploy/current/secrets.yaml", rc=1, stderr="No such file or directory")
    return run


def test_the_next_release_reads_the_secret_back_from_secrets_yaml_and_stores_only_a_reference(make_run) -> None:
    base = {**canonicalize(make_run({}, {}).ctx.profile.flags, SCHEMA).as_dict()}
    run = roll_run(make_run, {**base, "admin-api-key": SECRET_REF},
                   secrets_yaml=f'api-key: "k"\nadmin-api-key: "{ADMIN}"\n', sets=("max-running-requests=64",))
    releases_accepted(run.node)
    rec = run.step("resolve_release")
    cand = run.ctx.state.candidate
    assert cand is not None and cand.new_flags.get("admin-api-key") == ADMIN  # the real value, from its source
    assert cand.flag_diff == [("max-running-requests", 2048, 64)] and ADMIN not in json.dumps(rec.details)
    run.step("install_release")
    rid = run.ctx.state.server.release
    install = run.node.commands("script")[-1]
    assert json.loads(written(install, rid, "flags.json"))["admin-api-key"] == SECRET_REF
    for name in ("flags.json", "meta.json", "sglang.service"):
        assert ADMIN not in written(install, rid, name), name
    assert yaml.safe_load(written(install, rid, "secrets.yaml"))["admin-api-key"] == ADMIN


def test_setting_a_secret_flag_shows_a_reference_in_the_diff(make_run) -> None:
    base = canonicalize(make_run({}, {}).ctx.profile.flags, SCHEMA).as_dict()
    run = roll_run(make_run, base, secrets_yaml=None, sets=(f"admin-api-key={ADMIN}",))
    run.step("resolve_release")
    cand = run.ctx.state.candidate
    assert cand is not None and cand.flag_diff == [("admin-api-key", None, SECRET_REF)]
    assert ADMIN not in json.dumps(cand.stored(cand.new_flags))


def test_a_secret_stored_redacted_is_refused_unless_given_anew(make_run) -> None:
    base = canonicalize(make_run({}, {}).ctx.profile.flags, SCHEMA).as_dict()
    stored = {**base, "admin-api-key": REDACTED}  # what an older deploy wrote into flags.json
    run = roll_run(make_run, stored, secrets_yaml='api-key: "k"\n', sets=("max-running-requests=64",))
    with pytest.raises(ConfigError, match="stored redacted"):
        run.step("resolve_release")
    run = roll_run(make_run, stored, secrets_yaml='api-key: "k"\n', sets=(f"admin-api-key={ADMIN}",))
    run.step("resolve_release")
    cand = run.ctx.state.candidate
    assert cand is not None and cand.new_flags.get("admin-api-key") == ADMIN


def test_a_changed_secret_flag_changes_the_env_hash_so_up_installs_it(inventory) -> None:
    """`up` compares the installed unit and env hashes: a new secret value must show in one of them."""
    host = inventory.hosts["pve-gpu-1"]
    prof: ServerProfile = inventory.profile_for(host).model_copy(update={"api_key": None})
    first, second = (render_bundle(host, prof, flags=canonicalize({**prof.flags, "admin-api-key": key}, SCHEMA))
                     for key in (ADMIN, ADMIN + "-rotated"))
    assert first.file("sglang.service").sha256 == second.file("sglang.service").sha256
    assert first.file("sglang.env").sha256 != second.file("sglang.env").sha256
    env = first.file("sglang.env")
    assert env.mode == 0o600 and f'DEPLOY_SECRET_FLAG_ADMIN_API_KEY="{ADMIN}"' in env.content
    assert ADMIN not in env.redacted().content


def test_up_over_a_secret_stored_redacted_converges_to_the_profile(make_run) -> None:
    """A release from an older deploy holds `<redacted>` in flags.json: `up` never runs with it."""
    from tests.unit.steps.test_server_steps import unit_facts

    run = make_run({}, {})
    stored = {**canonicalize(run.ctx.profile.flags, SCHEMA).as_dict(), "admin-api-key": REDACTED}
    facts = {**unit_facts(run, same=False), "current_flags": json.dumps(stored),
             "current_meta": json.dumps({"id": CURRENT, "source": "up"}), "current_verdict": '{"verdict": "kept"}'}
    run = make_run({}, facts)
    run.node.answer("DEPLOY_PROBE_EOF", json.dumps({"ok": True, "version": "0.5.12.post1"}))
    releases_accepted(run.node)
    rec = run.step("server_unit")
    assert rec.status == "changed"
    bundle = run.ctx.state.server.bundle
    assert bundle is not None and "admin-api-key" not in bundle.flags
    assert REDACTED not in bundle.file("sglang.service").content
