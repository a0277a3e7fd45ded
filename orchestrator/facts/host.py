"""The PVE node's facts (`HOST.x`): each its command and the parser that makes its value."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.facts.base import HostFact, Read, if_ok, of_stdout, q, read_with
from orchestrator.hardware.kernel_log import kernel_log_command
from orchestrator.hardware.power_limit import QUERY_COMMAND as POWER_LIMIT_QUERY
from orchestrator.hardware.power_limit import parse_power_limits
from orchestrator.hardware.smi_health import LINK_QUERY_FIELDS
from orchestrator.inventory.models import Host
from orchestrator.monitoring.publish import state_command as metrics_state_command
from orchestrator.monitoring.state import MetricsState
from orchestrator.p2p.parse import P2PKind, P2PMatrix, parse_p2p
from orchestrator.parsers import ParseError
from orchestrator.parsers.devices import parse_dev_listing, parse_proc_devices
from orchestrator.parsers.driver import loaded_driver_version
from orchestrator.parsers.gpu_query import parse_power_rows
from orchestrator.parsers.hostfacts import (
    LspciReport,
    PveVersion,
    parse_kernel_cmdline,
    parse_lspci,
    parse_modprobe_uvm_hmm,
    parse_module_param_bool,
    parse_pveversion,
)
from orchestrator.parsers.pve import (
    parse_aplinfo,
    parse_cluster_view,
    parse_config_json,
    parse_pct_status,
    parse_pending,
    volids,
)
from orchestrator.parsers.topo import parse_topo
from orchestrator.remote.batch import CommandOutput
from orchestrator.render.boot_unit import boot_unit_fact, parse_boot_unit
from orchestrator.render.power_unit import UNIT_NAME as POWER_UNIT
from orchestrator.stacks.kernel_caches import CACHE_DIR_MARK, CacheDirState
from orchestrator.verdicts.cache_disk import parse_usage, usage_command

#: The node's cluster and its guests, one JSON document a line (parsers.pve.parse_cluster_view).
CLUSTER_COMMAND = ("pvesh get /cluster/status --output-format json && echo && "
                   "pvesh get /cluster/resources --type vm --output-format json")


def unless_ct_exists(h: Host, command: str) -> str:
    """`command` only while the CT does not exist (prints nothing otherwise).

    Why the config file and not `pct status`: skipping on it is exactly as safe and costs no program start (pct
    is a Perl program, about 0.2 s on a node). `pct status` fails precisely when PVE's `load_config` finds no
    `/etc/pve/nodes/<this node>/lxc/<vmid>.conf`, and `/etc/pve/lxc` is PVE's link to that directory; a CT of
    another cluster node fails both the same way.
    """
    return f"test -e /etc/pve/lxc/{h.container.vmid}.conf || {command}"


def _present(out: CommandOutput) -> bool:
    return out.stdout.strip() == "present"


def _pveversion(out: CommandOutput) -> PveVersion | None:
    return parse_pveversion(out.stdout) if out.rc == 0 and out.stdout else None


def _lspci(out: CommandOutput) -> LspciReport | None:
    """None when lspci printed nothing or failed; output that is not lspci's raises ParseError where it is read."""
    return parse_lspci(out.stdout) if out.rc == 0 and out.stdout.strip() else None


def p2p_matrix(kind: P2PKind) -> Callable[[CommandOutput], P2PMatrix | None]:
    """The parser of a `topo -p2p` fact: the matrix, or None when nvidia-smi failed or printed none."""
    def read(out: CommandOutput) -> P2PMatrix | None:
        if out.rc != 0:
            return None
        try:
            return parse_p2p(out.stdout, kind)
        except ParseError:
            return None
    return read


@dataclass(frozen=True)
class SmiAnswer:
    """`nvidia-smi -q`'s health sections as the hardware judge reads them: its output (None when it printed
    nothing at all) and its error text (a lost GPU's line, with the others' sections still in `stdout`)."""

    sections: str | None
    errors: str


def _smi_answer(out: CommandOutput) -> SmiAnswer:
    printed = out.stdout.strip() or out.stderr.strip()
    return SmiAnswer(out.stdout if printed else None, out.stderr)


def _owner(text: str) -> CacheDirState | None:
    """`uid:gid` from stat's output and whether deploy's mark is in it; None for `absent` (or anything else)."""
    lines = text.split()
    if not lines or not re.fullmatch(r"\d+:\d+", lines[0]):
        return None
    return CacheDirState(lines[0], CACHE_DIR_MARK in lines[1:])


class HOST:
    """The node's facts."""

    #: The PVE version (None: pveversion failed, not a PVE node).
    pveversion = HostFact("pveversion", lambda h, p: "pveversion", _pveversion)
    #: The loaded NVIDIA kernel module's version (None: not loaded).
    driver_version = HostFact("driver_version", lambda h, p: "cat /proc/driver/nvidia/version",
                              lambda o: loaded_driver_version(o.stdout if o.rc == 0 else None))
    dev_listing = HostFact("dev_listing", lambda h, p: "ls -l /dev/nvidia*", of_stdout(parse_dev_listing))
    proc_devices = HostFact("proc_devices", lambda h, p: "cat /proc/devices", of_stdout(parse_proc_devices))
    cmdline = HostFact("cmdline", lambda h, p: "cat /proc/cmdline", if_ok(parse_kernel_cmdline))
    #: Whether /etc/modprobe.d sets uvm_disable_hmm (None: it does not say).
    modprobe = HostFact("modprobe", lambda h, p: "cat /etc/modprobe.d/*.conf 2>/dev/null; true",
                        of_stdout(parse_modprobe_uvm_hmm))
    uvm_hmm = HostFact("uvm_hmm", lambda h, p: "cat /sys/module/nvidia_uvm/parameters/uvm_disable_hmm",
                       lambda o: parse_module_param_bool(o.stdout) if o.rc == 0 else None)
    # Device headers, bus ranges, ACS control and PCIe links only: ~30 KB instead of ~430 KB of `lspci -vvv`.
    lspci_acs = HostFact("lspci_acs", lambda h, p: (
        "lspci -vvv 2>/dev/null | grep -E '^[0-9a-f]{2,4}:|ACSCtl|Bus: primary|LnkCap:|LnkSta:'"), _lspci)
    #: The boot unit that recreates the NVIDIA nodes before pve-guests (render/boot_unit.py); None: not installed.
    boot_unit = HostFact("boot_unit", lambda h, p: boot_unit_fact(), if_ok(parse_boot_unit))
    # The GPUs the driver enumerates (a row each; the doctor counts them, as `nvidia-smi -L` would list them) and
    # their links (compared with the container's): one nvidia-smi run for both questions.
    topo = HostFact("topo", lambda h, p: "nvidia-smi topo -m", read_with(parse_topo))
    p2p_read = HostFact("p2p_read", lambda h, p: "nvidia-smi topo -p2p r", p2p_matrix("read"))
    p2p_write = HostFact("p2p_write", lambda h, p: "nvidia-smi topo -p2p w", p2p_matrix("write"))
    #: `pct status` of the container ("running", "stopped", …); None when it does not exist.
    ct_status = HostFact("ct_status", lambda h, p: f"pct status {h.container.vmid}", of_stdout(parse_pct_status))
    #: The CT's config (None: pvesh could not read it, the CT went away; not JSON: ParseError where it is read).
    ct_config = HostFact("ct_config", lambda h, p: (
        f"pvesh get /nodes/{q(h.pve.node)}/lxc/{h.container.vmid}/config --output-format json"),
        if_ok(parse_config_json))
    #: The node's cluster (name, quorum, members) and every VMID in it, whichever node has it (steps/cluster.py);
    #: None when pvesh could not say (not root, PVE not answering).
    cluster = HostFact("cluster", lambda h, p: CLUSTER_COMMAND, if_ok(parse_cluster_view))
    # Keys that wait for the CT's next start ([pve:pending]); `ct_config` shows their pending values.
    ct_pending = HostFact("ct_pending", lambda h, p: (
        f"pvesh get /nodes/{q(h.pve.node)}/lxc/{h.container.vmid}/pending --output-format json"),
        lambda o: parse_pending(o.stdout) if o.rc == 0 else {})
    # The node's appliance index, which `POST aplinfo` downloads from, and the templates in the storage: read only
    # while the CT does not exist (the container step creates from them, and reads them for nothing else).
    aplinfo = HostFact("aplinfo", lambda h, p: unless_ct_exists(
        h, f"pvesh get /nodes/{q(h.pve.node)}/aplinfo --output-format json"), of_stdout(parse_aplinfo))
    templates = HostFact("templates", lambda h, p: unless_ct_exists(
        h, f"pvesh get /nodes/{q(h.pve.node)}/storage/{q(h.container.template_storage)}"
        "/content --content vztmpl --output-format json"), of_stdout(volids))
    #: Power and utilisation per GPU now (empty: nvidia-smi failed).
    gpu_power = HostFact("gpu_power", lambda h, p: (
        "nvidia-smi --query-gpu=index,power.draw,power.limit,utilization.gpu --format=csv,noheader,nounits"),
        lambda o: parse_power_rows(o.stdout) if o.rc == 0 else [])
    # GPU hardware health (orchestrator/hardware, docs/hardware.md): the kernel log's Xids since the stored cursor,
    # ECC / remapped rows / clocks-event reasons, and each link with its load (judged only under load). The three
    # are texts: hardware.state.judge_hardware reads them together (a lost GPU in one explains the others).
    gpu_xids = HostFact("gpu_xids", lambda h, p: kernel_log_command(), lambda o: o.stdout)
    #: The full `-q`: GPU Recovery Action (the driver's verdict, R565+) is in no `-d` section.
    gpu_health = HostFact("gpu_health", lambda h, p: "nvidia-smi -q", _smi_answer)
    gpu_links = HostFact("gpu_links", lambda h, p: (
        f"nvidia-smi --query-gpu={','.join(LINK_QUERY_FIELDS)} --format=csv,nounits"),
        lambda o: o.stdout if o.stdout.strip() else None)
    #: Each GPU's power limit in force and its allowed range (None: nvidia-smi failed; hardware/power_limit.py).
    power_limits = HostFact("power_limits", lambda h, p: POWER_LIMIT_QUERY, if_ok(parse_power_limits))
    #: The unit that re-applies the power limit deploy set (render/power_unit.py); its text is the record.
    power_unit = HostFact("power_unit", lambda h, p: boot_unit_fact(POWER_UNIT), if_ok(parse_boot_unit))
    #: Whether the inventory's driver installer is a file on the host.
    installer = HostFact("installer", lambda h, p: (
        f"test -f {q(h.container.driver_installer)} && echo present" if h.container.driver_installer
        else "echo none"), _present)
    # The host directory bind-mounted at the model path: it must exist before the container step mounts it.
    model_mount = HostFact("model_mount", lambda h, p: (
        f"test -d {q(h.container.model_mount)} && echo present || echo absent" if h.container.model_mount
        else "echo none"), _present)
    #: The owner (`uid:gid`) of the host directory bind-mounted at the container's kernel cache root, and whether
    #: deploy made it (its mark file); None when it is not there yet (the container step creates it, owned by the
    #: container's root). A directory deploy did not make is never chowned or chmodded.
    kernel_cache_dir = HostFact("kernel_cache_dir", lambda h, p: (
        f"stat -c '%u:%g' {q(h.container.kernel_cache_dir)} 2>/dev/null && "
        f"{{ test -f {q(h.container.kernel_cache_dir + '/' + CACHE_DIR_MARK)} && echo {CACHE_DIR_MARK} || :; }} "
        "|| echo absent"), of_stdout(_owner))
    #: The kernel cache directory's filesystem, free space, bytes and entries (doctor's kernel-cache row,
    #: orchestrator/verdicts/cache_disk.py): the inventory's container.kernel_cache, else the default per VMID.
    kernel_cache_usage = HostFact("kernel_cache_usage", lambda h, p: usage_command(h.container.kernel_cache_dir),
                                  of_stdout(parse_usage))
    #: What the last publish of the tool's metrics carried over (orchestrator/monitoring/state.py).
    metrics_state = HostFact("metrics_state", lambda h, p: metrics_state_command(),
                             lambda o: MetricsState.from_json(o.stdout))


__all__ = ["CLUSTER_COMMAND", "HOST", "Read", "SmiAnswer", "p2p_matrix", "unless_ct_exists"]
