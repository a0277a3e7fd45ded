"""Facts: everything the steps read from the host and the container, gathered in ONE SSH round trip.

Host facts run on the PVE node; container facts run inside the container through ONE command of the container
adapter that carries its own inner batch, so reading a dozen container facts costs one container exec, not a dozen.
Parsing stays in orchestrator.parsers; this module only names commands and keeps their raw output.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.hardware.kernel_log import kernel_log_command
from orchestrator.hardware.smi_health import LINK_QUERY_FIELDS
from orchestrator.inventory.models import Host, ServerProfile
from orchestrator.monitoring.publish import state_command as metrics_state_command
from orchestrator.parsers.ct_gpus import CT_GPU_QUERY, CtGpus, parse_ct_gpus
from orchestrator.parsers.netaddr import address_command, net0_ifname
from orchestrator.parsers.packages import DPKG_FORMAT
from orchestrator.parsers.pve import ClusterView, parse_cluster_view, parse_pct_status
from orchestrator.parsers.sections import CommandOutput, batch_failure, build_batch_script, split_batch_output
from orchestrator.parsers.watchdog import RESULT_MARK as WATCHDOG_RESULT_MARK
from orchestrator.parsers.weights import RECORD_PATH
from orchestrator.remote.container import NOT_RUNNING, PATHS, Container
from orchestrator.remote.ssh import SshHost
from orchestrator.render.boot_unit import boot_unit_fact
from orchestrator.scripts import render_script

CmdFn = Callable[[Host, ServerProfile], str]

#: Before reading a container's facts: wait until its systemd has finished booting (enabled units started), so the
#: facts say what the boot leaves behind rather than a moment in the middle of it. `pct start` returns once LXC says
#: the container runs, and `pct exec` does not wait for its systemd either; after a host reboot pve-guests starts the
#: container while nobody watches. So every container read waits (a booted container answers at once), bounded:
#: early in a boot `systemctl` cannot reach systemd yet ("Failed to connect to bus", no output), which is asked again
#: until the bound; a boot that has not reached `running` or `degraded` within BOOT_WAIT_S prints BOOT_UNSETTLED and
#: its state, and no fact is read.
BOOT_WAIT_S = 120
BOOT_UNSETTLED = "__CT_BOOT_UNSETTLED__"
BOOT_STATES = ("running", "degraded")


def settle_boot_script(wait_s: int) -> str:
    """The shell that waits for the container's boot (at most wait_s seconds), or prints why it gave up."""
    return (f"boot_end=$(( $(date +%s) + {int(wait_s)} )); "
            "while :; do boot_left=$(( boot_end - $(date +%s) )); "
            '[ "$boot_left" -gt 0 ] || boot_left=1; '
            'boot_state=$(timeout "$boot_left" systemctl is-system-running --wait 2>/dev/null); '
            f'case "$boot_state" in {"|".join(BOOT_STATES)}) break ;; '
            '""|offline|initializing|starting) [ "$(date +%s)" -lt "$boot_end" ] && { sleep 0.2; continue; } ;; '
            f'esac; echo "{BOOT_UNSETTLED} ${{boot_state:-no answer}}"; exit 0; done')


SETTLE_BOOT = settle_boot_script(BOOT_WAIT_S)


#: Debian packages the pipeline needs inside the container, which a stock debian-12-standard may lack:
#: python3 + python3-venv (the venv sglang lives in; ensurepip brings pip), curl (health facts and probes),
#: ca-certificates (https indexes, mirrors and the model hub). Checked in the facts round trip, installed by
#: the ct_packages step.
CT_PACKAGES = ("ca-certificates", "curl", "python3", "python3-venv")
#: The watchdog's files as the `watchdog` fact lists them (orchestrator.render.watchdog writes them).
WATCHDOG_FILES = (PATHS.watchdog_script, PATHS.watchdog_config, PATHS.watchdog_unit_path, PATHS.watchdog_timer_path)


def _q(s: str) -> str:
    return shlex.quote(s)


T = TypeVar("T")


def raw(out: CommandOutput) -> CommandOutput:
    """The parser of a fact whose step reads the exit code and text itself."""
    return out


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One read: its name in the batch, its command (from the host and profile), the parser of its output.

    Steps name facts by these objects (`ctx.facts.get(HOST.driver_version)`), never by string, so a typo is a
    mypy error rather than a KeyError in the middle of a run.
    """

    name: str
    command: CmdFn
    parse: Callable[[CommandOutput], T]


@dataclass(frozen=True)
class HostFact(Fact[T]):
    """A fact read on the PVE node; always read when a step names it."""


@dataclass(frozen=True)
class CtFact(Fact[T]):
    """A fact read inside the container, in its one inner batch; unknown (None) while it is not running."""


def _pct_state(out: CommandOutput) -> str | None:
    return parse_pct_status(out.stdout)


#: The node's cluster and its guests, one JSON document a line (parsers.pve.parse_cluster_view).
CLUSTER_COMMAND = ("pvesh get /cluster/status --output-format json && echo && "
                   "pvesh get /cluster/resources --type vm --output-format json")


def _cluster(out: CommandOutput) -> ClusterView | None:
    """The node's cluster; None when pvesh could not say (not root, PVE not answering)."""
    return parse_cluster_view(out.stdout) if out.rc == 0 else None


def _ct_gpus(out: CommandOutput) -> CtGpus:
    return parse_ct_gpus(out.stdout, out.stderr, out.rc)


def _json_object(out: CommandOutput) -> dict[str, Any] | None:
    """A file holding one JSON object (a release's meta.json, verdict.json, flags.json); None when absent/invalid."""
    if out.rc != 0 or not out.stdout.strip():
        return None
    try:
        data = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _unless_ct_exists(h: Host, command: str) -> str:
    """`command` only while the CT does not exist (prints nothing otherwise).

    Why the config file and not `pct status`: skipping on it is exactly as safe and costs no program start (pct
    is a Perl program, about 0.2 s on a node). `pct status` fails precisely when PVE's `load_config` finds no
    `/etc/pve/nodes/<this node>/lxc/<vmid>.conf`, and `/etc/pve/lxc` is PVE's link to that directory; a CT of
    another cluster node fails both the same way.
    """
    return f"test -e /etc/pve/lxc/{h.container.vmid}.conf || {command}"


def health_code_command(p: ServerProfile) -> str:
    """curl's HTTP code of the server's /health ("000": no answer), waiting as long as sglang's /health may take
    under load (the profile's health_probe_timeout_s), so a slow answer is never read as a server that is down."""
    return (f"curl -s -o /dev/null -m {p.health_probe_timeout_s} -w '%{{http_code}}' "
            f"http://{_q(p.host)}:{p.port}/health")


def sglang_version_command(venv: str) -> str:
    """The sglang version pip installed in `venv`: the `Version:` header of its `sglang-V.dist-info/METADATA`.

    Why not `python -c 'import sglang; print(sglang.__version__)'`: a real `import sglang` loads its frontend
    language and backends (numpy, requests, …), seconds of CPU on a node, and the container's facts wait for their
    slowest read. The record pip wrote is what `pip show sglang` and `importlib.metadata.version("sglang")` report,
    and it names the release a wheel was built from, as `__version__` does. No match (no venv, no sglang): sed's
    error and a non-zero exit, so the step installs. Only each file's header is read (`-s`: per file), and two
    dist-infos print two lines, which equal no pin.
    """
    return sglang_version_of(_q(venv.rstrip('/')))


def sglang_version_of(venv_word: str) -> str:
    """sglang_version_command for a venv given as a shell word already quoted (`"$v"` in a loop)."""
    return (f"sed -s -n '1,/^$/ s/^Version: *//p' "
            f"{venv_word}/lib/python3*/site-packages/sglang-[0-9]*.dist-info/METADATA")


def current_stack_dists_command() -> str:
    """The distributions installed in the current release's stack venv (meta.json's `stack.venv`), one
    `name-version.dist-info` directory name a line; nothing for a release without a stack."""
    meta = _q(f"{PATHS.current_link}/meta.json")
    return (f"v=$(sed -n 's/.*\"venv\": *\"\\([^\"]*\\)\".*/\\1/p' {meta} 2>/dev/null) && [ -n \"$v\" ] && "
            "for d in \"$v\"/lib/python3*/site-packages/*.dist-info; do [ -d \"$d\" ] && printf '%s\\n' \"${d##*/}\"; "
            "done; true")


def stacks_listing_command() -> str:
    """Every stack record in the container, one line each: the record's JSON, TAB, the sglang version pip's record
    in its venv names now (empty: the venv is gone), so a removed or broken venv is never taken for a stack."""
    return (f"if cd {_q(PATHS.stacks_dir)} 2>/dev/null; then for f in *.json; do [ -f \"$f\" ] || continue; "
            "v=$(sed -n 's/.*\"venv\": *\"\\([^\"]*\\)\".*/\\1/p' \"$f\"); "
            f"printf '%s\\t%s\\n' \"$(tr -d '\\n' < \"$f\")\" \"$({sglang_version_of(chr(34) + '$v' + chr(34))} "
            "2>/dev/null | head -n 1)\"; done; fi")


class HOST:
    """The node's facts."""

    pveversion = HostFact("pveversion", lambda h, p: "pveversion", raw)
    driver_version = HostFact("driver_version", lambda h, p: "cat /proc/driver/nvidia/version", raw)
    dev_listing = HostFact("dev_listing", lambda h, p: "ls -l /dev/nvidia*", raw)
    proc_devices = HostFact("proc_devices", lambda h, p: "cat /proc/devices", raw)
    cmdline = HostFact("cmdline", lambda h, p: "cat /proc/cmdline", raw)
    modprobe = HostFact("modprobe", lambda h, p: "cat /etc/modprobe.d/*.conf 2>/dev/null; true", raw)
    uvm_hmm = HostFact("uvm_hmm", lambda h, p: "cat /sys/module/nvidia_uvm/parameters/uvm_disable_hmm", raw)
    # Device headers, bus ranges, ACS control and PCIe links only: ~30 KB instead of ~430 KB of `lspci -vvv`.
    lspci_acs = HostFact("lspci_acs", lambda h, p: (
        "lspci -vvv 2>/dev/null | grep -E '^[0-9a-f]{2,4}:|ACSCtl|Bus: primary|LnkCap:|LnkSta:'"), raw)
    #: The boot unit that recreates the NVIDIA nodes before pve-guests (render/boot_unit.py).
    boot_unit = HostFact("boot_unit", lambda h, p: boot_unit_fact(), raw)
    # The GPUs the driver enumerates (a row each; the doctor counts them, as `nvidia-smi -L` would list them) and
    # their links (compared with the container's): one nvidia-smi run for both questions.
    topo = HostFact("topo", lambda h, p: "nvidia-smi topo -m", raw)
    p2p_read = HostFact("p2p_read", lambda h, p: "nvidia-smi topo -p2p r", raw)
    p2p_write = HostFact("p2p_write", lambda h, p: "nvidia-smi topo -p2p w", raw)
    #: `pct status` of the container ("running", "stopped", …); None when it does not exist.
    ct_status = HostFact("ct_status", lambda h, p: f"pct status {h.container.vmid}", _pct_state)
    ct_config = HostFact("ct_config", lambda h, p: (
        f"pvesh get /nodes/{_q(h.pve.node)}/lxc/{h.container.vmid}/config --output-format json"), raw)
    #: The node's cluster (name, quorum, members) and every VMID in it, whichever node has it (steps/cluster.py).
    cluster = HostFact("cluster", lambda h, p: CLUSTER_COMMAND, _cluster)
    # Keys that wait for the CT's next start ([pve:pending]); `ct_config` shows their pending values.
    ct_pending = HostFact("ct_pending", lambda h, p: (
        f"pvesh get /nodes/{_q(h.pve.node)}/lxc/{h.container.vmid}/pending --output-format json"), raw)
    # The node's appliance index, which `POST aplinfo` downloads from, and the templates in the storage: read only
    # while the CT does not exist (the container step creates from them, and reads them for nothing else).
    aplinfo = HostFact("aplinfo", lambda h, p: _unless_ct_exists(
        h, f"pvesh get /nodes/{_q(h.pve.node)}/aplinfo --output-format json"), raw)
    templates = HostFact("templates", lambda h, p: _unless_ct_exists(
        h, f"pvesh get /nodes/{_q(h.pve.node)}/storage/{_q(h.container.template_storage)}"
        "/content --content vztmpl --output-format json"), raw)
    gpu_power = HostFact("gpu_power", lambda h, p: (
        "nvidia-smi --query-gpu=index,power.draw,power.limit,utilization.gpu --format=csv,noheader,nounits"), raw)
    # GPU hardware health (orchestrator/hardware, docs/hardware.md): the kernel log's Xids since the stored cursor,
    # ECC / remapped rows / clocks-event reasons, and each link with its load (judged only under load).
    gpu_xids = HostFact("gpu_xids", lambda h, p: kernel_log_command(), raw)
    gpu_health = HostFact("gpu_health", lambda h, p: "nvidia-smi -q -d ECC,ROW_REMAPPER,PERFORMANCE", raw)
    gpu_links = HostFact("gpu_links", lambda h, p: (
        f"nvidia-smi --query-gpu={','.join(LINK_QUERY_FIELDS)} --format=csv,nounits"), raw)
    installer = HostFact("installer", lambda h, p: (
        f"test -f {_q(h.container.driver_installer)} && echo present" if h.container.driver_installer
        else "echo none"), raw)
    # The host directory bind-mounted at the model path: it must exist before the container step mounts it.
    model_mount = HostFact("model_mount", lambda h, p: (
        f"test -d {_q(h.container.model_mount)} && echo present || echo absent" if h.container.model_mount
        else "echo none"), raw)
    #: What the last publish of the tool's metrics carried over (orchestrator/monitoring/state.py); "" before it.
    metrics_state = HostFact("metrics_state", lambda h, p: metrics_state_command(), raw)


class CT:
    """The container's facts."""

    # The device nodes the running CT got at its start: a driver reload on the host since then leaves them stale.
    dev_listing = CtFact("dev_listing", lambda h, p: "ls -l /dev/nvidia*", raw)
    # The GPUs the CT sees and its NVML userspace version: one nvidia-smi instead of `-L` plus a driver query.
    gpus = CtFact("gpus", lambda h, p: CT_GPU_QUERY, _ct_gpus)
    topo = CtFact("topo", lambda h, p: "nvidia-smi topo -m", raw)
    p2p_read = CtFact("p2p_read", lambda h, p: "nvidia-smi topo -p2p r", raw)
    p2p_write = CtFact("p2p_write", lambda h, p: "nvidia-smi topo -p2p w", raw)
    sglang_version = CtFact("sglang_version", lambda h, p: sglang_version_command(p.venv), raw)
    #: The software stacks built or adopted in the container (orchestrator/stacks.py).
    stacks = CtFact("stacks", lambda h, p: stacks_listing_command(), raw)
    #: What pip's records in the current release's stack venv say is installed (stack drift against its lock).
    stack_dists = CtFact("stack_dists", lambda h, p: current_stack_dists_command(), raw)
    # Complete weights, not just config.json: every file of deploy's record of the download (with sizes), or the
    # shards the index names (orchestrator.parsers.weights).
    weights = CtFact("weights", lambda h, p: (
        render_script("weights_check.sh.j2", model_path=p.model_path, record_path=RECORD_PATH)), raw)
    missing_pkgs = CtFact("missing_pkgs", lambda h, p: (
        f"dpkg-query -W -f {_q(DPKG_FORMAT)} {' '.join(map(_q, CT_PACKAGES))}"), raw)
    # Body hashes: the managed `# deploy:` header (release id) is excluded, as in render.files.body_sha256.
    unit_sha = CtFact("unit_sha", lambda h, p: " ; ".join(
        f"printf '%s %s\\n' \"$(awk 'BEGIN{{h=1}} h && /^# deploy:/ {{next}} {{h=0; print}}' {f} | sha256sum "
        f"| cut -d' ' -f1)\" {f}" for f in (PATHS.unit_path, PATHS.env_path))
        + f" ; test -f {PATHS.unit_path} -a -f {PATHS.env_path}", raw)
    current_release = CtFact("current_release", lambda h, p: f"readlink {PATHS.current_link}", raw)
    releases = CtFact("releases", lambda h, p: f"ls -1 {PATHS.releases_dir}", raw)
    current_meta = CtFact("current_meta", lambda h, p: f"cat {PATHS.current_link}/meta.json", _json_object)
    current_verdict = CtFact("current_verdict", lambda h, p: f"cat {PATHS.current_link}/verdict.json", _json_object)
    current_flags = CtFact("current_flags", lambda h, p: f"cat {PATHS.current_link}/flags.json", _json_object)
    # The last record of every plain bench run of the current release (file name, TAB, JSON): roll baselines.
    current_bench = CtFact("current_bench", lambda h, p: (
        f"cd {PATHS.current_link} && for f in $(ls -1 bench-*--*.jsonl 2>/dev/null | sort); "
        "do printf '%s\\t' \"$f\"; tail -n 1 \"$f\"; done"), raw)
    # Not a read: stops the benches a dead run left behind. Gathered only by runs that hold the host lock
    # (steps.session.ensure_facts), so it costs no round trip of its own.
    stop_leftovers = CtFact("stop_leftovers", lambda h, p: (
        render_script("stop_leftovers.sh.j2", runs_dir=PATHS.runs_dir)), raw)
    active = CtFact("active", lambda h, p: f"systemctl is-active {PATHS.unit_name}", raw)
    # the container's address on the site network (a DHCP lease is known only inside): orchestrator.parsers.netaddr
    ct_address = CtFact("ct_address", lambda h, p: address_command(net0_ifname(h.container.net0)), raw)
    enabled = CtFact("enabled", lambda h, p: f"systemctl is-enabled {PATHS.unit_name}", raw)
    main_pid = CtFact("main_pid", lambda h, p: f"systemctl show -p MainPID --value {PATHS.unit_name}", raw)
    # The running server: its pid, then its argv one word a line (no secret: those reach sglang by --config).
    server_process = CtFact("server_process", lambda h, p: (
        f"p=$(systemctl show -p MainPID --value {PATHS.unit_name}); echo \"$p\"; "
        "[ \"${p:-0}\" = 0 ] || tr '\\0' '\\n' < \"/proc/$p/cmdline\""), raw)
    health = CtFact("health", lambda h, p: health_code_command(p), raw)

    # The watchdog's installed files ("PATH MODE BODY-SHA256" each, header excluded), its timer's state and
    # its last check's systemd Result.
    watchdog = CtFact("watchdog", lambda h, p: " ; ".join(
        f"printf '%s %s %s\\n' {f} \"$(stat -c %a {f} 2>/dev/null)\" \"$(awk 'BEGIN{{h=1}} h && /^# deploy:/ "
        f"{{next}} {{h=0; print}}' {f} 2>/dev/null | sha256sum | cut -d' ' -f1)\"" for f in WATCHDOG_FILES)
        + " ; printf 'timer %s %s\\n' \"$(systemctl is-active sglang-watchdog.timer)\" "
          "\"$(systemctl is-enabled sglang-watchdog.timer 2>/dev/null)\" ; printf 'last %s\\n' "
          "\"$(systemctl show -p Result --value sglang-watchdog.service 2>/dev/null)\"", raw)
    # The state file, then the last check's systemd Result (a check that fails leaves a stale file behind).
    watchdog_state = CtFact("watchdog_state", lambda h, p: (
        f"cat {PATHS.watchdog_state} 2>/dev/null; printf '\\n{WATCHDOG_RESULT_MARK}\\n'; "
        "systemctl show -p Result --value sglang-watchdog.service 2>/dev/null; true"), raw)


def _status_mark(nonce: str) -> str:
    return f"@@DEPLOY:{nonce}:PCT_STATUS@@"


def _named(ns: type, kind: type[Fact[Any]]) -> dict[str, Any]:
    facts = {f.name: f for f in vars(ns).values() if isinstance(f, kind)}
    assert all(getattr(ns, n) is f for n, f in facts.items()), f"a {ns.__name__} attribute is not its fact's name"
    return facts


#: Every fact by its batch name (the batch output comes back by name); steps never look facts up here.
HOST_FACTS: dict[str, HostFact[Any]] = _named(HOST, HostFact)
CT_FACTS: dict[str, CtFact[Any]] = _named(CT, CtFact)


class Facts:
    """Raw outputs by fact name (internal: look them up with `get(HOST.x)` / `get(CT.x)`); `ct` is empty when
    the container is absent or not running."""

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

    def _ct_command(self, facts: Iterable[CtFact[Any]], *, with_status: bool) -> tuple[str, str]:
        """The container's inner batch, behind the boot settle: no fact is read from a half-booted container.

        With `with_status`, the `pct status` that guards it is framed in its output as HOST.ct_status's answer
        (see `_take_status`): the same program, arguments and moment as that fact's own command, so the batch
        runs one `pct status` instead of two.
        """
        nonce = secrets.token_hex(8)
        inner = build_batch_script({f.name: f.command(self.host_cfg, self.profile) for f in facts}, nonce)
        mark = _status_mark(nonce) if with_status else None
        return self.container.if_running(self.container.shell_command(f"{SETTLE_BOOT}\n{inner}"),
                                         status_mark=mark), nonce

    def _take_status(self, raw: CommandOutput, nonce: str) -> CommandOutput:
        """HOST.ct_status from the framed `pct status` at the start of the container command's output; the rest
        is returned. The frame is printed by the node's shell before anything runs in the container, so it is
        anchored at the start and carries this batch's nonce."""
        mark = re.escape(_status_mark(nonce))
        m = re.match(rf"{mark} (-?\d+)\n(.*?)\n{mark}\n", raw.stdout, re.DOTALL)
        if m is None:
            raise RemoteError("the container facts came back without the `pct status` that guards them",
                              fix=f"run again; if it repeats, run `pct status {self.host_cfg.container.vmid}` on "
                                  "the host to see why it fails", host=self.host_cfg.name)
        status = m.group(2)
        self.host[HOST.ct_status.name] = CommandOutput(int(m.group(1)), status + "\n" if status else "", "")
        return CommandOutput(raw.rc, raw.stdout[m.end():], raw.stderr)

    def gather(self, host_facts: Iterable[HostFact[Any]], ct_facts: Iterable[CtFact[Any]], *,
               extra: dict[str, str] | None = None, what: str = "fact gathering") -> dict[str, CommandOutput]:
        """One round trip for all given facts; `extra` commands ride along and are returned.

        Container facts are read only once the container's boot has settled (SETTLE_BOOT, same round trip).
        """
        host_list = sorted(set(host_facts), key=lambda f: f.name)
        commands = {f.name: f.command(self.host_cfg, self.profile) for f in host_list}
        ct_list = sorted(set(ct_facts), key=lambda f: f.name)
        nonce = ""
        shared_status = bool(ct_list) and HOST.ct_status in host_list
        if shared_status:
            del commands[HOST.ct_status.name]
        if ct_list:
            commands["ct_facts"], nonce = self._ct_command(ct_list, with_status=shared_status)
        commands.update(extra or {})
        out = self.ssh.batch(commands, what=what)
        for f in host_list:
            if not (shared_status and f is HOST.ct_status):
                self.host[f.name] = out[f.name]
        if ct_list:
            raw_ct = out.pop("ct_facts")
            if shared_status:
                raw_ct = self._take_status(raw_ct, nonce)
            self.record_ct(raw_ct, [f.name for f in ct_list], nonce)
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
            self.ct.update(self._split_ct(raw, nonce))
            self.ct_running = True

    def _split_ct(self, raw: CommandOutput, nonce: str) -> dict[str, CommandOutput]:
        """The container's sections; a batch that could not write its files, or output cut short, is a RemoteError
        that says so (a full container disk would otherwise read as facts that printed nothing)."""
        vmid, host = self.host_cfg.container.vmid, self.host_cfg.name
        failure = batch_failure(raw.rc, raw.stderr)
        if failure is not None:
            raise RemoteError(f"CT {vmid} could not run its facts batch: {failure}",
                              fix=f"free space in the container (`pct exec {vmid} -- df -h /tmp` on the host shows "
                                  "it), then run again", host=host)
        try:
            return split_batch_output(raw.stdout, nonce)
        except ValueError as exc:
            said = next((ln.strip() for ln in reversed(raw.stderr.splitlines()) if ln.strip()), "")
            raise RemoteError(f"CT {vmid}'s facts came back cut short (exit {raw.rc}"
                              + (f", {said!r}" if said else "") + f"; {exc})",
                              fix=f"run again; if it repeats, see what ends `pct exec {vmid}` early (its free space: "
                                  f"`pct exec {vmid} -- df -h /tmp`)", host=host) from exc

    @property
    def ct_state(self) -> str | None:
        """`pct status` of the container ("running", "stopped", …); None when absent or not read."""
        return self.find(HOST.ct_status)

    @property
    def ct_stopped(self) -> bool:
        """The container exists but is not running: facts from inside it are unknown until it starts."""
        state = self.ct_state
        return state is not None and state != "running" and not self.ct_running

    @property
    def count(self) -> int:
        """How many facts have been read (host and container)."""
        return len(self.host) + len(self.ct)

    @overload
    def get(self, fact: HostFact[T]) -> T: ...

    @overload
    def get(self, fact: CtFact[T]) -> T | None: ...

    def get(self, fact: HostFact[T] | CtFact[T]) -> T | None:
        """A host fact's parsed value (it must have been read: a step names it in `host_facts=`), or a
        container fact's (None while the container is not running)."""
        if isinstance(fact, HostFact):
            return fact.parse(self.host[fact.name])
        out = self.ct.get(fact.name)
        return fact.parse(out) if out is not None else None

    def find(self, fact: Fact[T]) -> T | None:
        """Like `get`, but None for a fact this run did not read (code shared by steps that read different sets)."""
        out = (self.host if isinstance(fact, HostFact) else self.ct).get(fact.name)
        return fact.parse(out) if out is not None else None
