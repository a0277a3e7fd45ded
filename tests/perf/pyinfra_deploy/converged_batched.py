"""Issue 47's pyinfra side: deploy's converged `up --skip-bench` checks, written the fastest pyinfra way we know.

Run by tests/perf/pyinfra_compare.py (`pyinfra -y INVENTORY.py converged_batched.py`) beside the one-read-per-check
converged_checks.py; never run it against a real host. Where converged_checks.py reads each check through its own
`Command` fact (44 SSH round trips), this file makes TWO:
1. one custom fact (`ConvergedReads`, a `FactBase` as pyinfra's own facts are) whose command runs every read deploy's
   converged `up` gathers, in one shell on the node: the node's commands, then ONE `pct exec VMID -- sh -c …` that
   waits for the container's boot and runs the container's commands. The commands are deploy's own fact commands
   for this host (the host data's `host_commands` and `ct_commands`, rendered by the comparison from the union of
   the facts `up`'s steps name, as deploy's lock step gathers them): the same remote work, judged here;
2. the smoke check in the container (`/v1/models`, a deterministic chat completion, `/server_info` saved into the
   current release with its API keys redacted), as deploy's smoke step does in one `pct exec`.
Both run inside `python.call` check operations through `host.get_fact` / `host.run_shell_command`, raising on a
mismatch, so a failed check fails the host and pyinfra's exit. Expected unit, env, boot-unit and watchdog files are
rendered on the controller with jinja2 (pyinfra's own template engine) and compared by SHA-256 of their body (the
`# deploy:` header excluded, as deploy's `unit_sha` and `watchdog` facts hash them).

`ROUND_TRIPS` counts the commands this file sends; the last operation writes it to the host data's `count_file`.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shlex
from pathlib import Path

from jinja2 import Template
from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.operations import python

D = host.data
VMID = str(D.vmid)
ROUND_TRIPS = [0]
#: The container's answer when it is not running (no container command ran).
NOT_RUNNING = "__CT_NOT_RUNNING__"


class CheckFailed(Exception):
    """A converged check that does not hold."""


def framed(commands: dict[str, str], nonce: str) -> str:
    """Each command in its own subshell, its stdout framed by a marker line with its name and followed by its
    exit code; stderr dropped (no check below reads it)."""
    return "\n".join(f"printf '\\n@@{nonce}:%s@@\\n' {shlex.quote(name)}; ( {command}\n) 2>/dev/null; "
                     f"printf '\\n@@{nonce}:rc %s@@\\n' $?" for name, command in commands.items())


class ConvergedReads(FactBase[dict[str, tuple[int, str]]]):
    """Every read of deploy's converged `up`, node and container, in one command: {name: (rc, stdout)}."""

    def command(self, vmid: str, host_commands: dict[str, str], ct_commands: dict[str, str], nonce: str) -> str:
        inner = ("s=$(timeout 120 systemctl is-system-running --wait 2>/dev/null); "
                 f"printf '\\n@@{nonce}:ct_boot@@\\n%s\\n@@{nonce}:rc 0@@\\n' \"$s\"\n"
                 + framed({f"ct:{k}": v for k, v in ct_commands.items()}, nonce))
        # One `pct status` (a Perl program, ~0.2 s) both answers `ct_status` and guards the container's reads.
        status = (f"st=$(pct status {vmid} 2>/dev/null); printf '\\n@@{nonce}:ct_status@@\\n%s\\n@@{nonce}:rc %s@@\\n' "
                  "\"$st\" $?; ")
        return (framed({k: v for k, v in host_commands.items() if k != "ct_status"}, nonce) + "\n" + status +
                f"if [ \"$st\" = 'status: running' ]; then pct exec {vmid} -- sh -c {shlex.quote(inner)}; "
                f"else echo {NOT_RUNNING}; fi; true")

    def process(self, output: list[str]) -> dict[str, tuple[int, str]]:
        text = "\n".join(output)
        nonce = re.search(r"@@([0-9a-f]+):", text)
        if nonce is None:
            return {}
        parts = re.split(rf"\n?@@{nonce.group(1)}:(.*?)@@\n", "\n" + text)
        found: dict[str, tuple[int, str]] = {}
        for name, body, rc in zip(parts[1::4], parts[2::4], parts[3::4], strict=False):
            found[name] = (int(rc.removeprefix("rc ")), body)
        return found


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def body_sha(text: str) -> str:
    """SHA-256 of a file's body as deploy's facts hash it: leading `# deploy:` header lines left out (awk's
    `print` ends every line with a newline)."""
    lines = text.splitlines()
    while lines and lines[0].startswith("# deploy:"):
        lines.pop(0)
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


def rendered(path: str) -> str:
    """An expected file rendered on the controller, as a pyinfra `files.template` would render it."""
    return Template(Path(path).read_text(), keep_trailing_newline=True).render()


READS: dict[str, tuple[int, str]] = {}


def out(name: str) -> str:
    return READS[name][1] if name in READS else ""


def gather() -> None:
    """Round trip 1: every read."""
    ROUND_TRIPS[0] += 1
    READS.update(host.get_fact(ConvergedReads, vmid=VMID, host_commands=dict(D.host_commands),
                               ct_commands=dict(D.ct_commands), nonce=secrets.token_hex(8)))
    expect("ct_boot" in READS, f"CT {VMID} not running: {out('ct_status').strip()}")


# --- the node ---------------------------------------------------------------------------------------------------
def node() -> None:
    expect(out("pveversion").startswith("pve-manager/"), "not a PVE node")
    driver = re.search(r"Kernel Module(?: for [\w_]+)?\s+([\d.]+)", out("driver_version"))
    expect(driver is not None, "no NVIDIA kernel module loaded")
    assert driver is not None
    gpus = int(D.expected_gpus)
    expect(len(re.findall(r"/dev/nvidia\d+$", out("dev_listing"), re.M)) == gpus, "device nodes on the node")
    expect(re.search(r"^\s*\d+ nvidia-uvm$", out("proc_devices"), re.M) is not None, "no nvidia-uvm major")
    expect("iommu" in out("cmdline"), "IOMMU not on the kernel command line")
    expect(out("uvm_hmm").strip() in ("Y", "1"), "HMM not disabled in nvidia_uvm")
    expect(READS["lspci_acs"][0] == 0, "lspci failed")
    enabled, _separator, unit = (out("boot_unit") + "\n\n").split("\n", 2)  # state, separator line, the file
    expect(enabled.strip() == "enabled", "boot unit not enabled")
    expect(hashlib.sha256(unit[:-2].encode()).hexdigest()
           == hashlib.sha256(rendered(f"{D.files_dir}/deploy-nvidia-nodes.service").encode()).hexdigest(),
           "boot unit file differs")
    rows = [ln for ln in out("topo").splitlines() if re.match(r"GPU\d+\s", ln)]
    expect(len(rows) == gpus, f"{len(rows)} GPUs in the node's topology, want {gpus}")
    expect(out("ct_status").strip() == "status: running", f"CT {VMID} not running")
    config = json.loads(out("ct_config"))
    expect(config.get("hostname") == D.ct_hostname, "CT hostname differs")
    expect(READS["ct_pending"][0] == 0, "pending config unreadable")
    expect(out("aplinfo").strip() == "" and out("templates").strip() == "", "the container is to be created")
    cluster = [json.loads(line) for line in out("cluster").splitlines() if line.strip()]
    expect(any(r.get("vmid") == int(VMID) for r in cluster[-1]), f"CT {VMID} not in the cluster's resources")
    expect(re.search(r"\bXid\b", out("gpu_xids")) is None, "Xid errors in the kernel log")
    expect(READS["gpu_health"][0] == 0 and "Attached GPUs" in out("gpu_health"), "nvidia-smi -q failed")
    expect(len(out("gpu_links").strip().splitlines()) == gpus + 1, "GPU links unreadable")
    expect(READS["power_limits"][0] == 0, "power limits unreadable")
    expect(out("installer").strip() == "present", f"no driver installer {D.driver_installer}")
    expect(out("model_mount").strip() in ("present", "none"), "model mount missing on the node")
    expect(out("kernel_cache_dir").strip() != "absent", "kernel cache dir missing on the node")
    json.loads(out("metrics_state") or "{}")


# --- the container ----------------------------------------------------------------------------------------------
def container() -> None:
    expect(out("ct_boot").strip() in ("running", "degraded"), f"CT boot: {out('ct_boot').strip()}")
    gpus = int(D.expected_gpus)
    expect(len(re.findall(r"/dev/nvidia\d+$", out("ct:dev_listing"), re.M)) == gpus, "device nodes in the CT")
    lines = out("ct:gpus").strip().splitlines()
    expect(len(lines) == gpus + 1, f"{len(lines) - 1} GPUs in the CT")
    expect(lines[1].split(", ")[-1] in out("driver_version"), "userspace driver differs from the kernel module")
    expect(len([ln for ln in out("ct:topo").splitlines() if re.match(r"GPU\d+\s", ln)]) == gpus, "CT topology")
    for kind in ("ct:p2p_read", "ct:p2p_write"):  # rows " GPU0\tX\tOK\t…" (the header names GPUs, no status)
        rows = [ln.split() for ln in out(kind).splitlines() if re.match(r"\s*GPU\d+\s+(X|OK|[A-Z]?NS|DR|U)\s", ln)]
        cells = [c for row in rows for c in row[1:]]
        expect(len(cells) == gpus * gpus and set(cells) <= {"OK", "X"},
               f"{kind[3:]}: not every pair OK: {out(kind)[:400]!r}")
    expect(out("ct:sglang_version").strip() == D.sglang_want, "sglang version differs")
    weights = out("ct:weights")
    expect("missing" not in weights and "record\tnone" not in weights, "weights incomplete")
    pkgs = out("ct:missing_pkgs").splitlines()
    expect(len(pkgs) == len(D.ct_packages) and all(p.endswith("\tinstalled") for p in pkgs), "a package is missing")
    sums = {path: sha for sha, path in (ln.split(" ", 1) for ln in out("ct:unit_sha").splitlines() if " " in ln)}
    expect(sums.get(D.unit_path) == body_sha(rendered(f"{D.files_dir}/sglang.service")), "sglang.service differs")
    expect(sums.get(D.env_path) == body_sha(rendered(f"{D.files_dir}/sglang.env")), "sglang.env differs")
    current = out("ct:current_release").strip().rsplit("/", 1)[-1]
    expect(current in out("ct:releases").split(), "current release not among the releases")
    expect(json.loads(out("ct:current_meta")).get("sglang_version") == D.sglang_want, "meta names another sglang")
    expect(json.loads(out("ct:current_verdict")).get("verdict") == "kept", "current release not kept")
    json.loads(out("ct:current_flags"))
    for name in ("current_boot", "stacks", "stack_patched", "stack_dists", "venv_dists", "python_target",
                 "stack_usage", "stop_leftovers"):
        expect(READS[f"ct:{name}"][0] == 0, f"{name} unreadable")
    toolchain = out("ct:toolchain")
    expect(READS["ct:toolchain"][0] == 0 and toolchain.strip() != "", "toolchain unreadable")
    expect(out("ct:active").strip() == "active" and out("ct:enabled").strip() == "enabled", "sglang not active")
    expect(int(out("ct:main_pid").strip() or 0) != 0, "sglang has no main pid")
    expect(out("ct:health").strip() == "200", f"health: HTTP {out('ct:health').strip()}")
    lines = out("ct:watchdog").splitlines()
    want = [f"{w['path']} {w['mode']} {body_sha(rendered(w['src']))}" for w in D.watchdog_files]
    expect(lines[:len(want)] == want, "a watchdog file differs")
    expect(lines[len(want)] == "timer active enabled", "watchdog timer not active and enabled")
    expect(READS["ct:watchdog_state"][0] == 0, "watchdog state unreadable")


# --- round trip 2: the smoke check (deploy's smoke step) --------------------------------------------------------
REDACT_SAVE = """import json, os, sys
def red(v):
    if isinstance(v, dict):
        return {k: ("<redacted>" if k.endswith(("api_key", "password")) and x else red(x)) for k, x in v.items()}
    return [red(x) for x in v] if isinstance(v, list) else v
path = sys.argv[1]
with open(path + ".tmp", "w") as f:
    json.dump(red(json.load(sys.stdin)), f, sort_keys=True)
os.replace(path + ".tmp", path)
"""


def smoke() -> None:
    ROUND_TRIPS[0] += 1
    body = json.dumps({"model": D.served_model_name, "messages": [{"role": "user", "content": D.smoke_prompt}],
                       "temperature": 0, "max_tokens": int(D.smoke_max_tokens),
                       "chat_template_kwargs": {"enable_thinking": False}})
    base = f"http://{D.ct_address}:{D.sglang_port}"
    curl = f"curl -sSf --max-time {int(D.smoke_timeout)}"
    path = f"{D.releases_dir}/{out('ct:current_release').strip().rsplit('/', 1)[-1]}/server_info.json"
    script = (f"set -e; {curl} {base}/v1/models; echo; echo @@chat@@; "
              f"{curl} -X POST -H 'Content-Type: application/json' -d {shlex.quote(body)} {base}/v1/chat/completions; "
              f"{curl} {base}/server_info | python3 -c {shlex.quote(REDACT_SAVE)} {shlex.quote(path)}")
    ok, output = host.run_shell_command(f"pct exec {VMID} -- sh -c {shlex.quote(script)}")
    expect(bool(ok), f"smoke: a request failed: {output.stderr[-400:]!r}")
    models, _, chat = "\n".join(output.stdout_lines).partition("\n@@chat@@\n")
    expect(D.served_model_name in [m["id"] for m in json.loads(models)["data"]], "served model not listed")
    answer = json.loads(chat)["choices"][0]["message"]["content"]
    expect(re.search(D.smoke_regex, answer) is not None, "smoke answer differs")
    Path(D.count_file).write_text(str(ROUND_TRIPS[0]))


for check in (gather, node, container, smoke):
    python.call(name=check.__name__, function=check)
