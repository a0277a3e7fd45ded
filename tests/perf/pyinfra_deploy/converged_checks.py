"""Issue 41's pyinfra side: the converged checks of tests/perf/ansible/converged.yml, written the pyinfra way.

Run by tests/perf/pyinfra_compare.py (`pyinfra -y INVENTORY.py converged_checks.py`), whose inventory carries the host
data (tests/perf/ansible_compare.py's converged_vars: the same host, profile, paths and expected files as the Ansible
playbook's host vars); never run it against a real host. One `python.call` check operation per task of the playbook,
in its order, each reading what it judges through facts (`Command`, `Sha256File`, `File`) at execution time and
raising on a mismatch, so a failed check fails the host and pyinfra's exit. The expected unit, env, boot unit and
watchdog files are rendered on the controller with jinja2 (pyinfra's own template engine), as the playbook's
`template` lookups do, and compared by SHA-256. Container reads go through `pct exec VMID --` on the node, and the
health and smoke checks through `pct exec VMID -- curl` against the container's site address.

Every fact is one command on pyinfra's SSH connection (one round trip); `read` counts them and the last operation
writes the count to the file named by the host data `count_file`, which the comparison prints.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from jinja2 import Template
from pyinfra import host
from pyinfra.facts.files import File, Sha256File
from pyinfra.facts.server import Command
from pyinfra.operations import python

D = host.data
VMID = str(D.vmid)
READS = [0]
#: What a check read that a later one judges against (the host driver, the current release).
SEEN: dict[str, str] = {}


class CheckFailed(Exception):
    """A converged check that does not hold."""


def read(command: str) -> str:
    """One command's stdout through the `Command` fact (a failing command fails the host)."""
    READS[0] += 1
    out = host.get_fact(Command, command=command)
    return "" if out is None else str(out)


def ct(command: str) -> str:
    """One command in the container, through `pct exec` on the node."""
    return read(f"pct exec {VMID} -- {command}")


def ct_sh(script: str, *args: str) -> str:
    return ct(shlex.join(["sh", "-c", script, "sh", *args]))


def rendered_sha(path: str) -> str:
    """SHA-256 of an expected file rendered on the controller, as the playbook's `template` lookup does."""
    return hashlib.sha256(Template(Path(path).read_text(), keep_trailing_newline=True).render().encode()).hexdigest()


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def curl(path: str, *args: str) -> str:
    url = f"http://{D.ct_address}:{D.sglang_port}{path}"
    return ct(shlex.join(["curl", "-sSf", "--max-time", str(D.smoke_timeout), *args, url]))


# --- the node (deploy's HOST facts) -----------------------------------------------------------------------------
def host_reads() -> None:
    for command in ("pveversion", "cat /proc/devices", "cat /proc/cmdline",
                    "sh -c 'cat /etc/modprobe.d/*.conf 2>/dev/null; true'",
                    "cat /sys/module/nvidia_uvm/parameters/uvm_disable_hmm", "sh -c 'ls -l /dev/nvidia*'",
                    "sh -c \"lspci -vvv 2>/dev/null | grep -E '^[0-9a-f]{2,4}:|ACSCtl|Bus: primary'\""):
        read(command)


def host_driver() -> None:
    SEEN["host_driver"] = read("cat /proc/driver/nvidia/version")


def host_gpus() -> None:
    lines = read("nvidia-smi -L").splitlines()
    expect(len(lines) == int(D.expected_gpus), f"{len(lines)} GPUs on the node, want {D.expected_gpus}")


def boot_unit() -> None:
    expect(read("systemctl is-enabled deploy-nvidia-nodes.service").strip() == "enabled", "boot unit not enabled")
    got = host.get_fact(Sha256File, path="/etc/systemd/system/deploy-nvidia-nodes.service")
    READS[0] += 1
    expect(got == rendered_sha(f"{D.files_dir}/deploy-nvidia-nodes.service"), "boot unit file differs")


def host_topology() -> None:
    for command in ("nvidia-smi topo -m", "nvidia-smi topo -p2p r", "nvidia-smi topo -p2p w"):
        read(command)


def container_state() -> None:
    expect(read(f"pct status {VMID}").strip() == "status: running", f"CT {VMID} not running")
    config = json.loads(read(f"pvesh get /nodes/{D.pve_node}/lxc/{VMID}/config --output-format json"))
    expect(config.get("hostname") == D.ct_hostname, "CT hostname differs")
    read(f"pvesh get /nodes/{D.pve_node}/lxc/{VMID}/pending --output-format json")
    READS[0] += 1
    if not host.get_fact(File, path=f"/etc/pve/lxc/{VMID}.conf"):  # only to create the container
        read(f"pvesh get /nodes/{D.pve_node}/aplinfo --output-format json")
        read(f"pvesh get /nodes/{D.pve_node}/storage/{D.template_storage}/content --content vztmpl "
             "--output-format json")


def driver_installer() -> None:
    READS[0] += 1
    expect(bool(host.get_fact(File, path=D.driver_installer)), f"no driver installer {D.driver_installer}")


# --- the container (deploy's CT facts, through pct exec) --------------------------------------------------------
def ct_boot() -> None:
    state = ct("systemctl is-system-running --wait || true").strip()
    expect(state in ("running", "degraded"), f"CT boot: {state}")


def stop_leftovers() -> None:
    ct(shlex.join(["bash", "-c", Path(f"{D.files_dir}/stop_leftovers.sh").read_text()]))


def ct_nodes() -> None:
    ct_sh("ls -l /dev/nvidia*")


def ct_gpus() -> None:
    lines = ct(D.ct_gpu_query).splitlines()
    expect(len(lines) == int(D.expected_gpus) + 1, f"{len(lines) - 1} GPUs in the CT")
    expect(lines[1].split(", ")[-1] in SEEN["host_driver"], "userspace driver differs from the kernel module")


def ct_topology() -> None:
    for command in ("nvidia-smi topo -m", "nvidia-smi topo -p2p r", "nvidia-smi topo -p2p w"):
        ct(command)


def sglang_version() -> None:
    got = ct_sh(f"sed -s -n '1,/^$/ s/^Version: *//p' {D.venv}/lib/python3*/site-packages/"
                "sglang-[0-9]*.dist-info/METADATA").strip()
    expect(got == D.sglang_want, f"sglang {got}, want {D.sglang_want}")


def weights() -> None:
    out = ct(shlex.join(["bash", "-c", Path(f"{D.files_dir}/weights_check.sh").read_text()]))
    expect("missing" not in out and "record\tnone" not in out, "weights incomplete")


def ct_packages() -> None:
    out = ct(shlex.join(["dpkg-query", "-W", "-f", D.dpkg_format, *D.ct_packages]))
    expect(all(line.endswith("\tinstalled") for line in out.splitlines()), "a package is not installed")


def unit_files() -> None:
    sums = ct(f"sha256sum {D.unit_path} {D.env_path}").splitlines()
    expect(sums[0].split()[0] == rendered_sha(f"{D.files_dir}/sglang.service"), "sglang.service differs")
    expect(sums[1].split()[0] == rendered_sha(f"{D.files_dir}/sglang.env"), "sglang.env differs")


def releases() -> None:
    SEEN["current_release"] = ct(f"readlink {D.current_link}").strip()
    names = ct(f"ls -1 {D.releases_dir}").splitlines()
    expect(SEEN["current_release"].split("/")[-1] in names, "current release not among the releases")
    meta = json.loads(ct(f"cat {D.current_link}/meta.json"))
    expect(meta.get("sglang_version") == D.sglang_want, "release meta names another sglang")
    verdict = json.loads(ct(f"cat {D.current_link}/verdict.json"))
    expect(verdict.get("verdict") == "kept", "current release not kept")
    ct(f"cat {D.current_link}/flags.json")


def sglang_unit() -> None:
    expect(ct(f"systemctl is-active {D.unit_name}").strip() == "active", "sglang not active")
    expect(ct(f"systemctl is-enabled {D.unit_name}").strip() == "enabled", "sglang not enabled")
    expect(int(ct(f"systemctl show -p MainPID --value {D.unit_name}").strip() or 0) != 0, "sglang has no main pid")


def health() -> None:
    curl("/health")


def watchdog() -> None:
    script = ('for f in "$@"; do printf \'%s %s %s\\n\' "$f" "$(stat -c %a "$f")" "$(sha256sum < "$f" | cut -d\' \' '
              "-f1)\"; done; systemctl is-active sglang-watchdog.timer; systemctl is-enabled sglang-watchdog.timer")
    lines = ct_sh(script, *(w["path"] for w in D.watchdog_files)).splitlines()
    expect(lines[-2:] == ["active", "enabled"], "watchdog timer not active and enabled")
    want = [f"{w['path']} {w['mode']} {rendered_sha(w['src'])}" for w in D.watchdog_files]
    expect(lines[:-2] == want, "a watchdog file differs")


# --- the smoke check (deploy's smoke step) ----------------------------------------------------------------------
def smoke() -> None:
    models = json.loads(curl("/v1/models"))
    expect(D.served_model_name in [m["id"] for m in models["data"]], "served model not listed")
    body = json.dumps({"model": D.served_model_name, "messages": [{"role": "user", "content": D.smoke_prompt}],
                       "temperature": 0, "max_tokens": int(D.smoke_max_tokens),
                       "chat_template_kwargs": {"enable_thinking": False}})
    chat = json.loads(curl("/v1/chat/completions", "-X", "POST", "-H", "Content-Type: application/json",
                           "-d", body))
    expect(re.search(D.smoke_regex, chat["choices"][0]["message"]["content"]) is not None, "smoke answer differs")
    info = json.loads(curl("/server_info"))
    redacted = {k: ("<redacted>" if k.endswith("api_key") and v else v) for k, v in info.items()}
    ct_sh('printf %s "$2" > "$1.tmp" && mv "$1.tmp" "$1"', f"{D.state_dir}/{SEEN['current_release']}/server_info.json",
          json.dumps(redacted, sort_keys=True))
    Path(D.count_file).write_text(str(READS[0]))


for check in (host_reads, host_driver, host_gpus, boot_unit, host_topology, container_state, driver_installer,
              ct_boot, stop_leftovers, ct_nodes, ct_gpus, ct_topology, sglang_version, weights, ct_packages,
              unit_files, releases, sglang_unit, health, watchdog, smoke):
    python.call(name=check.__name__.replace("_", " "), function=check)
