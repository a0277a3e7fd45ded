"""Facts: everything the steps read from the host and the container, gathered in ONE SSH round trip.

Host facts run on the PVE node; container facts run inside the container through ONE command of the container
adapter that carries its own inner batch, so reading a dozen container facts costs one container exec, not a dozen.
Parsing stays in orchestrator.parsers; this module only names commands and keeps their raw output.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable, Iterable

from orchestrator.errors import CheckFailed
from orchestrator.inventory.models import Host, ServerProfile
from orchestrator.parsers.packages import DPKG_FORMAT
from orchestrator.parsers.pve import parse_pct_status
from orchestrator.parsers.sections import CommandOutput, build_batch_script, split_batch_output
from orchestrator.parsers.weights import RECORD_PATH
from orchestrator.remote.container import NOT_RUNNING, PATHS, Container
from orchestrator.remote.ssh import SshHost
from orchestrator.scripts import render_script

CmdFn = Callable[[Host, ServerProfile], str]

#: Before reading a just-started container: wait until its systemd has finished booting (enabled units started),
#: so the facts say what the boot leaves behind rather than a moment in the middle of it. `pct start` returns
#: before the container's systemd is up, and `pct exec` does not wait for it either. Bounded: a boot that has not
#: reached `running` or `degraded` within BOOT_WAIT_S prints BOOT_UNSETTLED and its state, and no fact is read.
BOOT_WAIT_S = 120
BOOT_UNSETTLED = "__CT_BOOT_UNSETTLED__"
BOOT_STATES = ("running", "degraded")
SETTLE_BOOT = (f"boot_state=$(timeout {BOOT_WAIT_S} systemctl is-system-running --wait 2>/dev/null); "
               f'case "$boot_state" in {"|".join(BOOT_STATES)}) ;; '
               f'*) echo "{BOOT_UNSETTLED} ${{boot_state:-no answer}}"; exit 0 ;; esac')


#: Debian packages the pipeline needs inside the container, which a stock debian-12-standard may lack:
#: python3 + python3-venv (the venv sglang lives in; ensurepip brings pip), curl (health facts and probes),
#: ca-certificates (https indexes, mirrors and the model hub). Checked in the facts round trip, installed by
#: the ct_packages step.
CT_PACKAGES = ("ca-certificates", "curl", "python3", "python3-venv")
#: The watchdog's files as the `watchdog` fact lists them (orchestrator.render.watchdog writes them).
WATCHDOG_FILES = (PATHS.watchdog_script, PATHS.watchdog_config, PATHS.watchdog_unit_path, PATHS.watchdog_timer_path)


def _q(s: str) -> str:
    return shlex.quote(s)


HOST_FACTS: dict[str, CmdFn] = {
    "pveversion": lambda h, p: "pveversion",
    "driver_version": lambda h, p: "cat /proc/driver/nvidia/version",
    "dev_listing": lambda h, p: "ls -l /dev/nvidia*",
    "proc_devices": lambda h, p: "cat /proc/devices",
    "cmdline": lambda h, p: "cat /proc/cmdline",
    "modprobe": lambda h, p: "cat /etc/modprobe.d/*.conf 2>/dev/null; true",
    "uvm_hmm": lambda h, p: "cat /sys/module/nvidia_uvm/parameters/uvm_disable_hmm",
    # Device headers, bus ranges and ACS control only: ~20 KB instead of ~430 KB of `lspci -vvv`.
    "lspci_acs": lambda h, p: "lspci -vvv 2>/dev/null | grep -E '^[0-9a-f]{2,4}:|ACSCtl|Bus: primary'",
    "nvsmi_list": lambda h, p: "nvidia-smi -L",
    "topo": lambda h, p: "nvidia-smi topo -m",
    "p2p_read": lambda h, p: "nvidia-smi topo -p2p r",
    "p2p_write": lambda h, p: "nvidia-smi topo -p2p w",
    "ct_status": lambda h, p: f"pct status {h.container.vmid}",
    "ct_config": lambda h, p: (f"pvesh get /nodes/{_q(h.pve.node)}/lxc/{h.container.vmid}/config "
                                 "--output-format json"),
    # Keys that wait for the CT's next start ([pve:pending]); `ct_config` shows their pending values.
    "ct_pending": lambda h, p: (f"pvesh get /nodes/{_q(h.pve.node)}/lxc/{h.container.vmid}/pending "
                                "--output-format json"),
    # The node's appliance index, which `POST aplinfo` downloads from: read only while the CT does not exist.
    "aplinfo": lambda h, p: (f"pct status {h.container.vmid} >/dev/null 2>&1 || "
                             f"pvesh get /nodes/{_q(h.pve.node)}/aplinfo --output-format json"),
    "templates": lambda h, p: (f"pvesh get /nodes/{_q(h.pve.node)}/storage/{_q(h.container.template_storage)}"
                               "/content --content vztmpl --output-format json"),
    "gpu_power": lambda h, p: ("nvidia-smi --query-gpu=index,power.draw,power.limit,utilization.gpu "
                               "--format=csv,noheader,nounits"),
    "installer": lambda h, p: (f"test -f {_q(h.container.driver_installer)} && echo present"
                               if h.container.driver_installer else "echo none"),
    # The host directory bind-mounted at the model path: it must exist before the container step mounts it.
    "model_mount": lambda h, p: (f"test -d {_q(h.container.model_mount)} && echo present || echo absent"
                                 if h.container.model_mount else "echo none"),
}

CT_FACTS: dict[str, CmdFn] = {
    # The device nodes the running CT got at its start: a driver reload on the host since then leaves them stale.
    "dev_listing": lambda h, p: "ls -l /dev/nvidia*",
    "nvsmi_list": lambda h, p: "nvidia-smi -L",
    "driver_version": lambda h, p: "nvidia-smi --query-gpu=driver_version --format=csv,noheader",
    "topo": lambda h, p: "nvidia-smi topo -m",
    "p2p_read": lambda h, p: "nvidia-smi topo -p2p r",
    "p2p_write": lambda h, p: "nvidia-smi topo -p2p w",
    "sglang_version": lambda h, p: f"{_q(PATHS.venv_python(p.venv))} -c 'import sglang; print(sglang.__version__)'",
    # Complete weights, not just config.json: every file of deploy's record of the download (with sizes), or the
    # shards the index names (orchestrator.parsers.weights).
    "weights": lambda h, p: render_script("weights_check.sh.j2", model_path=p.model_path, record_path=RECORD_PATH),
    "missing_pkgs": lambda h, p: f"dpkg-query -W -f {_q(DPKG_FORMAT)} {' '.join(map(_q, CT_PACKAGES))}",
    # Body hashes: the managed `# deploy:` header (release id) is excluded, as in render.files.body_sha256.
    "unit_sha": lambda h, p: " ; ".join(
        f"printf '%s %s\\n' \"$(awk 'BEGIN{{h=1}} h && /^# deploy:/ {{next}} {{h=0; print}}' {f} | sha256sum "
        f"| cut -d' ' -f1)\" {f}" for f in (PATHS.unit_path, PATHS.env_path))
    + f" ; test -f {PATHS.unit_path} -a -f {PATHS.env_path}",
    "current_release": lambda h, p: f"readlink {PATHS.current_link}",
    "releases": lambda h, p: f"ls -1 {PATHS.releases_dir}",
    "current_meta": lambda h, p: f"cat {PATHS.current_link}/meta.json",
    "current_verdict": lambda h, p: f"cat {PATHS.current_link}/verdict.json",
    "current_flags": lambda h, p: f"cat {PATHS.current_link}/flags.json",
    # The last record of every plain bench run of the current release (file name, TAB, JSON): roll baselines.
    "current_bench": lambda h, p: (f"cd {PATHS.current_link} && for f in $(ls -1 bench-*--*.jsonl 2>/dev/null | sort); "
                                   "do printf '%s\\t' \"$f\"; tail -n 1 \"$f\"; done"),
    # Not a read: stops the benches a dead run left behind. Gathered only by runs that hold the host lock
    # (steps.session.ensure_facts), so it costs no round trip of its own.
    "stop_leftovers": lambda h, p: render_script("stop_leftovers.sh.j2", runs_dir=PATHS.runs_dir),
    "active": lambda h, p: f"systemctl is-active {PATHS.unit_name}",
    "enabled": lambda h, p: f"systemctl is-enabled {PATHS.unit_name}",
    "main_pid": lambda h, p: f"systemctl show -p MainPID --value {PATHS.unit_name}",
    "health": lambda h, p: (f"curl -s -o /dev/null -m 5 -w '%{{http_code}}' "
                            f"http://{_q(p.host)}:{p.port}/health"),
    # The watchdog's installed files ("PATH MODE BODY-SHA256" each, header excluded) and its timer's state.
    "watchdog": lambda h, p: " ; ".join(
        f"printf '%s %s %s\\n' {f} \"$(stat -c %a {f} 2>/dev/null)\" \"$(awk 'BEGIN{{h=1}} h && /^# deploy:/ "
        f"{{next}} {{h=0; print}}' {f} 2>/dev/null | sha256sum | cut -d' ' -f1)\"" for f in WATCHDOG_FILES)
    + " ; printf 'timer %s %s\\n' \"$(systemctl is-active sglang-watchdog.timer)\" "
      "\"$(systemctl is-enabled sglang-watchdog.timer 2>/dev/null)\"",
    "watchdog_state": lambda h, p: f"cat {PATHS.watchdog_state}",
}


class Facts:
    """Raw outputs by name; `ct` is empty when the container is absent or not running."""

    def __init__(self, ssh: SshHost, host: Host, profile: ServerProfile, container: Container | None = None) -> None:
        self.ssh = ssh
        self.host_cfg = host
        self.profile = profile
        self.container = container or Container(ssh, host.container.vmid)
        self.host: dict[str, CommandOutput] = {}
        self.ct: dict[str, CommandOutput] = {}
        self.ct_running = False
        #: Set once the playbook's union of facts has been read (see steps.session.ensure_facts).
        self.gathered = False

    def _ct_command(self, names: Iterable[str], settle_boot: bool = False) -> tuple[str, str]:
        nonce = secrets.token_hex(8)
        inner = build_batch_script({n: CT_FACTS[n](self.host_cfg, self.profile) for n in names}, nonce)
        if settle_boot:
            inner = f"{SETTLE_BOOT}\n{inner}"
        return self.container.if_running(self.container.shell_command(inner)), nonce

    def gather(self, host_names: Iterable[str], ct_names: Iterable[str], *, extra: dict[str, str] | None = None,
               what: str = "fact gathering", settle_boot: bool = False) -> dict[str, CommandOutput]:
        """One round trip for all named facts; `extra` commands ride along and are returned.

        `settle_boot`: the container was just started; wait (in the same round trip) until its boot is done.
        """
        commands = {n: HOST_FACTS[n](self.host_cfg, self.profile) for n in sorted(set(host_names))}
        ct_list = sorted(set(ct_names))
        nonce = ""
        if ct_list:
            commands["ct_facts"], nonce = self._ct_command(ct_list, settle_boot)
        commands.update(extra or {})
        out = self.ssh.batch(commands, what=what)
        for name in host_names:
            self.host[name] = out[name]
        if ct_list:
            self.record_ct(out.pop("ct_facts"), ct_list, nonce)
        return {k: v for k, v in out.items() if k in (extra or {})}

    def record_ct(self, raw: CommandOutput, names: Iterable[str], nonce: str) -> None:
        """Split the container's inner batch (or note that the container is not running)."""
        unsettled = re.search(rf"^{BOOT_UNSETTLED} (.*)$", raw.stdout, re.MULTILINE)
        if unsettled:
            vmid = self.host_cfg.container.vmid
            raise CheckFailed(
                f"CT {vmid} did not finish booting within {BOOT_WAIT_S} s: its systemd says "
                f"{unsettled.group(1).strip()!r} (waited for `systemctl is-system-running --wait` to say "
                f"{' or '.join(BOOT_STATES)}); no facts were read from the half-booted container",
                fix=f"see what the boot waits for: `pct exec {vmid} -- systemctl list-jobs` and "
                    f"`pct exec {vmid} -- systemctl --failed` on the host; fix or disable that unit, then run "
                    "deploy up again", host=self.host_cfg.name, details={"boot_state": unsettled.group(1).strip()})
        if NOT_RUNNING in raw.stdout:
            self.ct_running = False
            for name in names:
                self.ct.pop(name, None)
        else:
            self.ct_running = True
            self.ct.update(split_batch_output(raw.stdout, nonce))

    @property
    def ct_state(self) -> str | None:
        """`pct status` of the container ("running", "stopped", …); None when absent or not read."""
        out = self.host.get("ct_status")
        return parse_pct_status(out.stdout) if out is not None else None

    @property
    def ct_stopped(self) -> bool:
        """The container exists but is not running: facts from inside it are unknown until it starts."""
        state = self.ct_state
        return state is not None and state != "running" and not self.ct_running

    def h(self, name: str) -> CommandOutput:
        return self.host[name]

    def c(self, name: str) -> CommandOutput | None:
        return self.ct.get(name)
