"""Bad inventory and flag input is refused with exit 2 before any change on the host (issue 13 §4): a key written
twice in YAML, a host entry given twice, a flag value of 120,000 characters, a value holding U+2028. The host is
read back with the plain ssh client: no container appears, the current release and the unit stay as they were.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import SHARED, DeployEnv

UNIT = "/etc/systemd/system/sglang.service"
HUGE = "x" * 120_000
LSEP = "chat\u2028template"


def no_container(env: DeployEnv) -> None:
    res = env.ssh("ls /etc/pve/lxc")
    assert res.rc == 0 and res.stdout.strip() == "", res.text


def refused(env: DeployEnv, *args: str) -> str:
    res = env.run(*args)
    assert res.rc == 2, res.text
    assert "Traceback" not in res.text and res.stderr.startswith("error: "), res.text
    return " ".join(res.stderr.split())  # the terminal wraps long lines; compare on words


def test_up_refuses_duplicate_keys_huge_values_and_line_separators(deploy_env: DeployEnv) -> None:
    env = deploy_env
    sim_yaml = env.inventory / "sim.yaml"
    good = sim_yaml.read_text()
    data = yaml.safe_load(good)
    vmid = data["hosts"][env.host]["container"]["vmid"]

    # vmid twice in one container block: once the last one silently won (CT 121 was created)
    sim_yaml.write_text(re.sub(rf"^(\s+)vmid: {vmid}\n", rf"\g<0>\g<1>vmid: {vmid + 1}\n", good, count=1, flags=re.M))
    assert yaml.safe_load(sim_yaml.read_text())["hosts"][env.host]["container"]["vmid"] == vmid + 1  # PyYAML's way
    err = refused(env, "up", "host", env.host, "--skip-bench")
    assert f"{sim_yaml}: line " in err and "key 'vmid' is given twice" in err
    no_container(env)

    # the host entry given twice, the second pointing elsewhere: once it silently redirected the connection
    hosts_block = good.split("hosts:\n", 1)[1].split("groups:\n", 1)[0]  # sim up writes a group after the hosts
    twice = hosts_block + hosts_block.replace(data["hosts"][env.host]["address"], "127.0.0.250")
    sim_yaml.write_text(good.replace(hosts_block, twice, 1))
    assert yaml.safe_load(sim_yaml.read_text())["hosts"][env.host]["address"] == "127.0.0.250"
    err = refused(env, "up", "host", env.host, "--skip-bench")
    assert f"key '{env.host}' is given twice" in err
    no_container(env)
    sim_yaml.write_text(good)

    # a flag value of 120,000 characters: once installed as a 121 KB unit
    env.set_profile(flags={"chat-template": HUGE})
    err = refused(env, "up", "host", env.host, "--skip-bench")
    assert "flag 'chat-template': value is 120,000 characters long; the limit is 8,192" in err
    assert HUGE[:100] not in err
    no_container(env)

    # U+2028 inside a value: str.splitlines (the tool's diff) and line-based readers split there
    env.set_profile(flags={"chat-template": LSEP})
    err = refused(env, "up", "host", env.host, "--skip-bench")
    assert "flag 'chat-template': value contains U+2028 LINE SEPARATOR at character 5" in err
    no_container(env)


@pytest.mark.xdist_group(SHARED)
def test_roll_refuses_bad_flag_input_and_changes_nothing(converged_shared: DeployEnv, tmp_path: Path) -> None:
    env = converged_shared

    def host_state() -> tuple[str, str, str, str]:
        cur = env.ct("readlink /var/lib/deploy/current")
        unit = env.ct(f"sha256sum {UNIT}")
        rels = env.ct("ls -1 /var/lib/deploy/releases")
        pid = env.ct("systemctl show -p MainPID --value sglang")
        assert cur.rc == unit.rc == rels.rc == pid.rc == 0
        return cur.stdout, unit.stdout, rels.stdout, pid.stdout

    before = host_state()
    host = env.host

    err = refused(env, "roll", "host", host, "--set", f"chat-template={HUGE}", "--skip-bench")
    assert "--chat-template: value is 120,000 characters long" in err and HUGE[:100] not in err

    err = refused(env, "roll", "host", host, "--set", f"chat-template={LSEP}", "--skip-bench")
    assert "--chat-template: value contains U+2028 LINE SEPARATOR at character 5" in err

    err = refused(env, "roll", "host", host, "--set", "max-running-requests=8", "--set", "max-running-requests=16",
                  "--skip-bench")
    assert "is given twice in --set" in err

    flags = tmp_path / "flags.yaml"
    flags.write_text("tensor-parallel-size: 8\nmax-running-requests: 1024\nmax-running-requests: 2048\n")
    err = refused(env, "roll", "host", host, "--flags", str(flags), "--skip-bench")
    assert f"{flags}: line 3: key 'max-running-requests' is given twice (first on line 2)" in err

    flags.write_text("tensor-parallel-size: 8\ntp-size: 4\n")
    err = refused(env, "roll", "host", host, "--flags", str(flags), "--skip-bench")
    assert "--tensor-parallel-size" in err and "keep one" in err

    assert host_state() == before
