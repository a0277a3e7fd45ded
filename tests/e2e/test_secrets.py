"""The secret search (issue 13 §2): with an API key read from a file, run `up`, a crashing roll, `bench`,
`history --bench --json` and `compare`; then look for the key everywhere a user or another process could read it:
every captured stdout/stderr, every file under the tool's state and inventory dirs, every file of the simulated
host and its container (with its mode), and `ps -eo args` on the host and inside the container.
The key may only turn up in files of mode 0600.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

import pytest

from tests.e2e.conftest import DeployEnv, Result

MAX_SCAN_BYTES = 64 * 1024 * 1024


def files_holding(key: str, top: Path) -> list[tuple[Path, int]]:
    """(path, mode) of every regular file under `top` whose bytes contain `key` (symlinks and devices skipped)."""
    needle = key.encode()
    hits: list[tuple[Path, int]] = []
    for dirpath, _dirs, filenames in os.walk(top, followlinks=False):
        for name in filenames:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SCAN_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if needle in data:
                hits.append((path, stat.S_IMODE(st.st_mode)))
    return hits


def secret_file(path: Path, value: str) -> Path:
    """A secret file as an operator keeps one: the value on one line, mode 0600, in a directory of its own."""
    path.parent.mkdir()
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.timeout(900)  # nine CLI runs (two of them rollbacks, two benches) on a shared 2-core machine
def test_api_key_is_found_only_in_0600_files(deploy_env: DeployEnv, tmp_path: Path) -> None:
    env = deploy_env
    key = "sk-" + secrets.token_hex(20)
    key_file = secret_file(tmp_path / "secret" / "sglang-api-key", key)
    env.set_profile(api_key={"file": str(key_file)})
    outputs: dict[str, Result] = {}

    def run(name: str, *args: str, ok: bool = True) -> Result:
        res = env.run(*args)
        outputs[name] = res
        assert (res.rc == 0) == ok, f"{name}: {res.text}"
        return res

    run("up", "--json", "up", "host", env.host, "--skip-bench")
    run("up again (text)", "up", "host", env.host, "--skip-bench")
    # A crashing roll: the candidate dies at start, its journal excerpt is quoted in the error and the verdict.
    env.ct_faults(crash_on_start=True, match="--max-running-requests 1024")
    roll = run("crashing roll", "--json", "roll", "host", env.host, "--set", "max-running-requests=1024",
               "--skip-bench", ok=False)
    assert roll.rc not in (0, 2) and roll.json["details"]["journal"], roll.text
    run("crashing roll (text)", "roll", "host", env.host, "--set", "max-running-requests=1024", "--skip-bench",
        ok=False)
    env.ct_faults(crash_on_start=False, match="none")
    first = run("bench", "--json", "bench", "host", env.host, "--set", "num-prompts=32").json["runs"][0]["run_id"]
    run("bench (text)", "bench", "host", env.host, "--set", "num-prompts=16")
    runs = run("history --bench --json", "--json", "history", "--bench", "host", env.host).json["runs"]
    second_id = next(r["id"] for r in runs if r["id"] != first)
    run("history --bench", "history", "--bench", "host", env.host)
    run("history --json", "--json", "history", "host", env.host)
    run("compare --json", "--json", "compare", first, second_id)
    run("compare", "compare", first, second_id)
    run("status --json", "--json", "status", "host", env.host)

    # Every violation is collected first, so one failing run lists all of them.
    problems: list[str] = []
    # 1. Nothing the tool printed carries the key.
    problems += [f"printed by `{name}`" for name, res in outputs.items() if key in res.stdout or key in res.stderr]

    # 2. Files: the tool's state and inventory, the simulated host and its container (sim root).
    state = Path(env.env["DEPLOY_STATE_DIR"])
    hits = [(p, m) for top in (state, env.inventory, env.root) for p, m in files_holding(key, top)]
    problems += [f"in {p} (mode {m:04o})" for p, m in hits if m != 0o600]
    print("files holding the key:", *(f"{m:04o} {p}" for p, m in hits), sep="\n  ")  # for -s runs
    ledger = state / "ledger.sqlite"
    for path, want in ((ledger, 0o600), (state, 0o700)):
        if stat.S_IMODE(path.stat().st_mode) != want:
            problems.append(f"{path} has mode {stat.S_IMODE(path.stat().st_mode):04o}, not {want:04o}")

    # 3. Processes: argv on the host (LXC shares the kernel: it sees the container's processes) and in the CT.
    host_ps = env.ssh("ps -eo args")
    ct_ps = env.ct("ps -eo args")
    assert host_ps.rc == 0 and ct_ps.rc == 0, host_ps.text + ct_ps.text
    assert "sglang.launch_server" in host_ps.stdout and "sglang.launch_server" in ct_ps.stdout
    problems += [f"in `ps -eo args` {where}" for where, res in (("on the host", host_ps), ("in the CT", ct_ps))
                 if key in res.stdout]
    assert problems == [], "the API key leaked:\n" + "\n".join(problems)

    # The search must find the key where it belongs, in the container and in the release directories.
    found = {p.name for p, _ in hits}
    assert {"sglang.env", "secrets.yaml"} <= found, found
    assert any("releases" in p.parts for p, _ in hits), hits
    # Stricter than the mode rule for the journal: the simulator keeps it 0600, real journald 0640 (group
    # systemd-journal). sglang's startup dump of its arguments must not reach it at all (logging.json).
    assert not [p for p, _ in hits if "journal" in p.parts], hits
    # Only the two files the docs name (up.md): not bench_serving's JSONL, whose /server_info copy holds the key
    # until the bench script redacts it (issue 38 item 8), though that file is 0600 too.
    assert {p.name for p, _ in hits} <= {"sglang.env", "secrets.yaml", "api-key", "sglang-api-key"}, hits
    # Both benches set num-prompts, so their files are sweep-*.jsonl (a bench-*.jsonl glob found none and the
    # check read ''): every JSONL bench_serving wrote, wherever it lies, is 0600 and holds the key redacted. The
    # boot ledger (boot.jsonl, deploy's own record of each start's phases, no server output) is not bench_serving's.
    found = "find /var/lib/deploy -name '*.jsonl*' ! -name boot.jsonl -type f -printf '%m %p\\n'"
    stored = env.ct(found).stdout.split()
    modes, paths = stored[0::2], stored[1::2]
    assert len(paths) >= 2 and set(modes) == {"600"}, stored
    for path in paths:
        jsonl = env.ct(f"cat {path}").stdout
        assert '"api_key": "<redacted>"' in jsonl and key not in jsonl, (path, jsonl[:500])
    assert "<redacted>" in outputs["history --bench --json"].stdout  # server_info's api_key, visibly withheld
    # The server still requires the key (it reads it from its 0600 config file, not from argv).
    code = env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models").stdout
    assert code in ("401", "403")


@pytest.mark.timeout(900)
def test_secret_flag_is_found_only_in_0600_files_and_the_server_runs_with_it(converged: DeployEnv) -> None:
    """Issue 21 §1: `roll --set admin-api-key=S`, a second roll and `up` again; S never in argv, the unit, meta or
    flags files, the journal or output, and every later release still runs with S (never with `<redacted>`)."""
    env = converged
    admin = "adm-" + secrets.token_hex(20)
    outputs: dict[str, Result] = {}

    def run(name: str, *args: str) -> Result:
        res = env.run(*args)
        outputs[name] = res
        assert res.rc == 0, f"{name}: {res.text}"
        return res

    first = run("roll --set admin-api-key", "--json", "roll", "host", env.host, "--set", f"admin-api-key={admin}",
                "--skip-bench").json
    assert first["diff"] == [{"flag": "admin-api-key", "old": None, "new": "<secret: secrets.yaml>"}]
    run("second roll (text)", "roll", "host", env.host, "--set", "max-running-requests=64", "--skip-bench")
    run("up again", "--json", "up", "host", env.host, "--skip-bench")
    history = run("history --json", "--json", "history", "host", env.host).json
    run("history", "history", "host", env.host)
    run("status --json", "--json", "status", "host", env.host)

    # The server of the newest release really runs with S: it read it from its 0600 secrets.yaml.
    info = json.loads(env.ct("curl -s http://127.0.0.1:8000/server_info").stdout)
    assert info["admin_api_key"] == admin and info["max_running_requests"] == 64
    current = history["current"]
    stored = json.loads(env.ct(f"cat /var/lib/deploy/releases/{current}/flags.json").stdout)
    assert stored["admin-api-key"] == "<secret: secrets.yaml>"

    problems = [f"printed by `{name}`" for name, res in outputs.items() if admin in res.stdout or admin in res.stderr]
    hits = [(p, m) for top in (Path(env.env["DEPLOY_STATE_DIR"]), env.inventory, env.root)
            for p, m in files_holding(admin, top)]
    problems += [f"in {p} (mode {m:04o})" for p, m in hits if m != 0o600]
    problems += [f"in the journal file {p}" for p, _ in hits if "journal" in p.parts]
    problems += [f"in `ps -eo args` {where}" for where, res in (("on the host", env.ssh("ps -eo args")),
                                                                 ("in the CT", env.ct("ps -eo args")))
                 if admin in res.stdout or "sglang.launch_server" not in res.stdout]
    journal = env.ct("journalctl -u sglang --no-pager -o cat")
    problems += ["in journalctl -u sglang"] if admin in journal.stdout else []
    problems += ["<redacted> in the unit"] if "<redacted>" in env.ct("cat /etc/systemd/system/sglang.service").stdout \
        else []
    assert problems == [], "the admin API key leaked:\n" + "\n".join(problems)
    assert {p.name for p, _ in hits} >= {"secrets.yaml"}, hits


@pytest.mark.timeout(900)
def test_hub_token_is_found_only_in_0600_files_and_each_answer_of_the_hub_is_named(converged: DeployEnv,
                                                                                    tmp_path: Path) -> None:
    """Issue 36 item 5: a gated weights_repo with `hf_token: {file: …}`. The hub refuses a token whose account was
    not granted (403: its own error), then serves it once granted; the token is then found only in 0600 files (the
    operator's own, the hub's list) and never in output, argv or the container once the download ended."""
    from simulator.software.hub import GATED_REPO_ID, grant_token

    env = converged
    token = "hf_" + secrets.token_hex(17)
    token_file = secret_file(tmp_path / "secret" / "hf-token", token)
    env.ct("systemctl stop sglang && rm -rf /models/GLM-5-NVFP4")
    env.set_profile(weights_repo=GATED_REPO_ID, hf_token={"file": str(token_file)})
    outputs: dict[str, Result] = {}

    refused = env.run("--json", "up", "host", env.host, "--skip-bench")
    outputs["refused up"] = refused
    print(refused.json["what"], refused.json["fix"], sep="\n")  # for -s runs (docs/troubleshooting.md)
    assert refused.rc == 3 and refused.json["error"] == "hub-refused", refused.text[-2000:]
    assert f"has no access to the gated model {GATED_REPO_ID}" in refused.json["what"], refused.json
    assert "403 GatedRepo" in refused.json["what"] and "request access" in refused.json["fix"]
    assert env.ct("test -e /var/lib/deploy/hf-token").rc != 0  # removed when the download ended
    grant_token(Path(env.sim.host_dir), token)
    for name, args in (("up", ("--json", "up", "host", env.host, "--skip-bench")),
                       ("up (text)", ("up", "host", env.host, "--skip-bench")),
                       ("status --json", ("--json", "status", "host", env.host))):
        outputs[name] = env.run(*args)
        assert outputs[name].rc == 0, f"{name}: {outputs[name].text[-2000:]}"
    step = next(s for s in outputs["up"].json["steps"] if s["name"] == "model_weights")
    assert step["status"] == "changed" and step["details"]["hub_client"].startswith("1."), step
    assert env.ct("test -e /var/lib/deploy/hf-token").rc != 0

    problems = [f"printed by `{name}`" for name, res in outputs.items() if token in res.stdout or token in res.stderr]
    hits = [(p, m) for top in (Path(env.env["DEPLOY_STATE_DIR"]), env.inventory, env.root, tmp_path)
            for p, m in files_holding(token, top)]
    problems += [f"in {p} (mode {m:04o})" for p, m in hits if m != 0o600]
    problems += [f"in `ps -eo args` {where}" for where, res in (("on the host", env.ssh("ps -eo args")),
                                                                 ("in the CT", env.ct("ps -eo args")))
                 if token in res.stdout]
    assert problems == [], "the hub token leaked:\n" + "\n".join(problems)
    # only the operator's file and the simulated hub's list of granted tokens: nothing in the container
    assert {p.name for p, _ in hits} == {"hf-token", "hub-tokens"}, hits
    assert not [p for p, _ in hits if "rootfs" in p.parts or "lxc" in p.parts], hits
