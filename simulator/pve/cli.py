"""`pct`, `pvesh`, `pveversion`, `nvidia-modprobe` and `lspci` on the simulated host (root@pam, like the real
CLI tools over SSH). pct/pvesh go through the same dispatcher as the HTTPS API; worker tasks run in the
foreground and print their log to stdout. An API error goes to stderr with exit code 255, and so does a failed
task under `pct`; under `pvesh` a failed task prints `TASK ERROR: …` and its UPID and exits 0, as the real one
does (pve-common RESTEnvironment `fork_worker` runs it synchronously and returns the UPID; pve-manager's pvesh
prints the result): only the task's own status (`exitstatus`) says it failed.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

from simulator.config import HostConfig, current_host
from simulator.pve.errors import PveError

if TYPE_CHECKING:
    from simulator.pve import schema

# The API, its schema, the ACLs and the container logic are imported by the subcommands that use them: `pct exec`
# and `pct push`, by far the most frequent commands on a host, need none of them (each import costs every call).

EXIT_ERR = 255


def _err(msg: str) -> int:
    sys.stderr.write(msg if msg.endswith("\n") else msg + "\n")
    return EXIT_ERR


def _print(line: str) -> None:
    print(line, flush=True)


#: pvesh's boolean format options (pve-common CLIFormatter / RESTHandler standard options).
FORMAT_FLAGS = ("noproxy", "human-readable", "noborder", "noheader", "quiet")


def parse_options(args: list[str], ep: schema.Endpoint | None) -> tuple[list[str], dict[str, str], list[str]]:
    """PVE CLI getopt: `--key value`, `--key=value`, `-key value`; a boolean option may stand alone.

    Returns (positionals, options, unknown option names).
    """
    from simulator.pve import schema

    pos: list[str] = []
    opts: dict[str, str] = {}
    unknown: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-") and len(a) > 1 and not re.fullmatch(r"-\d+", a):
            key = a.lstrip("-")
            value: str | None = None
            if "=" in key:
                key, value = key.split("=", 1)
            sch = schema.schema_for_key(ep.properties, key) if ep else {}
            if key in FORMAT_FLAGS:
                sch = {"type": "boolean"}
            elif ep is not None and sch is None and key != "output-format":
                unknown.append(key)
            if value is None:
                nxt = args[i + 1] if i + 1 < len(args) else None
                if (sch or {}).get("type") == "boolean" and (nxt is None or nxt.startswith("-")
                                                           or schema.parse_bool(nxt) is None):
                    value = "1"
                elif nxt is None:
                    value = ""
                else:
                    value = nxt
                    i += 1
            opts[key] = value
        else:
            pos.append(a)
        i += 1
    return pos, opts, unknown


def _param_error(exc: schema.ParamError, usage: str) -> int:
    lines = "".join(f"{k}: {v}" for k, v in sorted(exc.errors.items()))
    return _err(f"400 Parameter verification failed.\n{lines}\n{usage}\n")


def _api_error(exc: PveError) -> int:
    return _err(exc.message if exc.status in (500,) else f"{exc.status} {exc.message}")


def _call(method: str, path: str, params: dict[str, Any], usage: str, failed_task: str = "error") -> tuple[int, Any]:
    """One API call as root@pam; `failed_task="upid"` (pvesh): a failed task's result is its UPID, exit 0."""
    from simulator.pve import api, schema

    hp = current_host()
    try:
        return 0, api.handle(hp, method, path, params, api.Caller(user="root@pam", background=False,
                                                                   echo=_print))
    except schema.ParamError as exc:
        return _param_error(exc, usage), None
    except api.TaskFailed as exc:
        if failed_task == "upid":
            _print(f"TASK ERROR: {exc.exitstatus}")
            return 0, exc.upid
        return _err(exc.exitstatus), None
    except PveError as exc:
        return _api_error(exc), None


# ------------------------------------------------------------------------------------------------ pct

PCT_USAGE = {
    "create": "pct create <vmid> <ostemplate> [OPTIONS]",
    "set": "pct set <vmid> [OPTIONS]",
    "config": "pct config <vmid> [OPTIONS]",
    "pending": "pct pending <vmid>",
    "start": "pct start <vmid> [OPTIONS]",
    "stop": "pct stop <vmid> [OPTIONS]",
    "shutdown": "pct shutdown <vmid> [OPTIONS]",
    "reboot": "pct reboot <vmid> [OPTIONS]",
    "destroy": "pct destroy <vmid> [OPTIONS]",
    "status": "pct status <vmid> [OPTIONS]",
    "exec": "pct exec <vmid> [<extra-args>] [OPTIONS]",
    "push": "pct push <vmid> <file> <destination> [OPTIONS]",
    "pull": "pct pull <vmid> <path> <destination> [OPTIONS]",
    "list": "pct list",
    "enter": "pct enter <vmid> [OPTIONS]",
    "unlock": "pct unlock <vmid>",
}


def _vmid(value: str, usage: str) -> int | None:
    if not re.fullmatch(r"\d+", value):
        _err(f"400 Parameter verification failed.\nvmid: type check ('integer') failed - got '{value}'\n"
             f"{usage}\n")
        return None
    return int(value)


def pct_main(argv: list[str]) -> int:
    if not argv or argv[0] in ("help", "-h", "--help"):
        _print("USAGE: pct <COMMAND> [ARGS] [OPTIONS]\n" + "\n".join(f"       {u}" for u in PCT_USAGE.values()))
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in PCT_USAGE:
        return _err(f"unknown command 'pct {cmd}'\nUSAGE: pct <COMMAND> [ARGS] [OPTIONS]")
    usage = PCT_USAGE[cmd]
    hp = current_host()
    node = hp.load().node
    if cmd == "list":
        return _pct_list()
    if not rest:
        return _err(f"400 not enough arguments\n{usage}")
    vmid = _vmid(rest[0], usage)
    if vmid is None:
        return EXIT_ERR
    if cmd == "exec":
        return _pct_exec(vmid, rest[1:])
    if cmd == "enter":
        from simulator.lxc.attach import ENTER_COMMAND

        return _pct_exec(vmid, ENTER_COMMAND)
    if cmd == "unlock":
        return _pct_unlock(vmid, rest[1:], usage)
    base = f"/nodes/{node}/lxc"
    endpoints = {
        "create": ("POST", base), "set": ("PUT", f"{base}/{vmid}/config"),
        "config": ("GET", f"{base}/{vmid}/config"), "pending": ("GET", f"{base}/{vmid}/pending"),
        "start": ("POST", f"{base}/{vmid}/status/start"),
        "stop": ("POST", f"{base}/{vmid}/status/stop"), "shutdown": ("POST", f"{base}/{vmid}/status/shutdown"),
        "reboot": ("POST", f"{base}/{vmid}/status/reboot"),
        "destroy": ("DELETE", f"{base}/{vmid}"), "status": ("GET", f"{base}/{vmid}/status/current"),
    }
    if cmd in ("push", "pull"):
        return _pct_copy(cmd, vmid, rest[1:], usage)
    from simulator.pve import schema

    method, path = endpoints[cmd]
    ep = schema.find(method, path)
    pos, opts, unknown = parse_options(rest[1:], ep)
    if unknown:
        return _err(f"Unknown option: {unknown[0]}\n400 unable to parse option\n{usage}")
    params: dict[str, Any] = dict(opts)
    if cmd == "create":
        if not pos:
            return _err(f"400 not enough arguments\n{usage}")
        params.update(vmid=vmid, ostemplate=pos[0])
    elif pos:
        return _err(f"400 too many arguments\n{usage}")
    verbose = params.pop("verbose", None) if cmd == "status" else None
    rc, data = _call(method, path, params, usage)
    if rc:
        return rc
    if cmd == "config":
        for key in sorted(data):
            if key in ("digest", "lxc"):
                continue
            _print(f"{key}: {data[key]}")
        for k, v in data.get("lxc", []):
            _print(f"{k}: {v}")
    elif cmd == "pending":  # PVE::GuestHelpers::format_pending
        for item in sorted(data, key=lambda i: i["key"]):
            key, cur, new = item["key"], item.get("value"), item.get("pending")
            if key == "digest":
                continue
            if cur is not None and item.get("delete"):
                _print(f"del {key}: {cur}")
                continue
            if cur is not None:
                _print(f"cur {key}: {cur}")
            if new is not None:
                _print(f"new {key}: {new}")
    elif cmd == "status":
        _print(f"status: {data['status']}")
        if verbose:
            for key in sorted(k for k in data if k != "status"):
                _print(f"{key}: {data[key]}")
    return 0


def _pct_list() -> int:
    from simulator.pve.lxc import Node

    n = Node(current_host())
    _print(f"{'VMID':<10} {'Status':<10} {'Lock':<12} {'Name':<20}")
    for vmid in n.vmids():
        st = n.status(vmid)
        _print(f"{vmid:<10} {st['status']:<10} {st.get('lock', ''):<12} {st['name']:<20}")
    return 0


def _pct_unlock(vmid: int, args: list[str], usage: str) -> int:
    """pct's own `unlock` (no API path): remove_lock with no name, so any lock goes; none is an error."""
    from simulator.pve.lxc import Node

    if args:
        return _err(f"400 too many arguments\n{usage}")
    try:
        Node(current_host()).remove_lock(vmid)
    except PveError as exc:
        return _api_error(exc)
    return 0


def _pct_exec(vmid: int, args: list[str]) -> int:
    from simulator.lxc.attach import exec_command

    return exec_command(str(current_host().dir), vmid, args)


def _pct_copy(cmd: str, vmid: int, args: list[str], usage: str) -> int:
    from simulator.pve import pushpull as container

    pos, opts, _ = parse_options(args, None)
    if len(pos) != 2:
        return _err(f"400 not enough arguments\n{usage}")
    try:
        if cmd == "push":
            container.push(current_host(), vmid, pos[0], pos[1], opts.get("perms"),
                           int(opts.get("user", 0)), int(opts.get("group", 0)))
        else:
            container.pull(current_host(), vmid, pos[0], pos[1])
    except PveError as exc:
        return _api_error(exc)
    return 0


# ------------------------------------------------------------------------------------------------ pvesh

PVESH_METHODS = {"get": "GET", "create": "POST", "set": "PUT", "delete": "DELETE"}


def pvesh_main(argv: list[str]) -> int:
    import json

    from simulator.pve import schema, textout

    if not argv or argv[0] not in PVESH_METHODS:
        return _err("USAGE: pvesh <COMMAND> [ARGS] [OPTIONS]\n       pvesh create|delete|get|set <api_path> "
                    "[OPTIONS] [FORMAT_OPTIONS]")
    cmd = argv[0]
    usage = f"pvesh {cmd} <api_path> [OPTIONS] [FORMAT_OPTIONS]"
    if len(argv) < 2:
        return _err(f"400 not enough arguments\n{usage}")
    path = "/" + argv[1].strip("/")
    method = PVESH_METHODS[cmd]
    ep = schema.find(method, path)
    _, opts, _ = parse_options(argv[2:], ep)
    fmt = opts.pop("output-format", "text")
    if fmt not in ("text", "json", "json-pretty", "yaml"):
        return _err(f"400 Parameter verification failed.\noutput-format: value '{fmt}' does not have a value in "
                    "the enumeration 'text, json, json-pretty, yaml'\n{usage}\n")
    flags = {flag: schema.parse_bool(opts.pop(flag)) for flag in FORMAT_FLAGS if flag in opts}
    rc, data = _call(method, path, opts, usage, failed_task="upid")
    if rc or flags.get("quiet"):
        return rc
    if fmt == "json":
        _print(json.dumps(data, separators=(",", ":"), sort_keys=True))
    elif fmt == "json-pretty":
        _print(json.dumps(data, indent=4, sort_keys=True))
    elif fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=True))
    else:
        returns = ep.info.get("returns", {}) if ep is not None else {}
        sys.stdout.write(textout.render(data, returns, border=not flags.get("noborder"),
                                        header=not flags.get("noheader")))
    return 0


# ------------------------------------------------------------------------------------------------ pveum

PVEUM_USAGE = ("USAGE: pveum user token add <userid> <tokenid> [--privsep <boolean>] [OPTIONS]\n"
               "       pveum role add <roleid> [--privs <string>]\n"
               "       pveum acl modify <path> --roles <string> [--tokens <string>] [--propagate <boolean>] "
               "[--delete <boolean>]")


def pveum_main(argv: list[str]) -> int:
    """The pveum subcommands a test needs to make a privilege-separated token and grant it roles."""
    import json

    from simulator.pve import acl, schema, textout

    hp = current_host()
    words = [a for a in argv[:3] if not a.startswith("-")]
    try:
        if argv[:3] == ["user", "token", "add"]:
            pos, opts, _ = parse_options(argv[3:], None)
            if len(pos) != 2:
                return _err(f"400 not enough arguments\n{PVEUM_USAGE}")
            tokenid = f"{pos[0]}!{pos[1]}"
            privsep = schema.parse_bool(opts.get("privsep", "1"))
            secret = acl.add_token(hp, tokenid, privsep=bool(privsep))
            data = {"full-tokenid": tokenid, "info": {"privsep": int(bool(privsep))}, "value": secret}
            if opts.get("output-format", "text") == "text":
                sys.stdout.write(textout.render(data, {}))
            else:
                _print(json.dumps(data, sort_keys=True))
            return 0
        if words[:2] == ["role", "add"]:
            pos, opts, _ = parse_options(argv[2:], None)
            if len(pos) != 1:
                return _err(f"400 not enough arguments\n{PVEUM_USAGE}")
            acl.add_role(hp, pos[0], [p for p in opts.get("privs", "").replace(";", ",").split(",") if p])
            return 0
        if words[:2] == ["acl", "modify"]:
            pos, opts, _ = parse_options(argv[2:], None)
            if len(pos) != 1 or "roles" not in opts:
                return _err(f"400 not enough arguments\n{PVEUM_USAGE}")
            split = [r for r in opts["roles"].replace(";", ",").split(",") if r]
            tokens = [t for t in opts.get("tokens", "").replace(";", ",").split(",") if t]
            acl.modify_acl(hp, pos[0], split, tokens, propagate=schema.parse_bool(opts.get("propagate", "1")) == 1,
                           delete=schema.parse_bool(opts.get("delete", "0")) == 1)
            return 0
    except PveError as exc:
        return _api_error(exc)
    return _err(f"unknown command 'pveum {' '.join(words)}'\n{PVEUM_USAGE}")


# ------------------------------------------------------------------------------------------------ others


def pveversion_main(argv: list[str]) -> int:
    from simulator.pve import api

    cfg = current_host().load()
    kernel = "6.17.2-1-pve"
    if not argv:
        _print(f"pve-manager/{cfg.pve_version}/{api.REPOID[:8]} (running kernel: {kernel})")
        return 0
    if argv[0] in ("-v", "--verbose"):
        pkgs = [("proxmox-ve", f"9.1.0 (running kernel: {kernel})"),
                ("pve-manager", f"{cfg.pve_version} (running version: {cfg.pve_version}/{api.REPOID[:8]})"),
                (f"proxmox-kernel-{kernel}", kernel), ("ceph-fuse", "19.2.3-pve1"), ("corosync", "3.1.9-pve2"),
                ("libpve-common-perl", "9.0.11"), ("lxc-pve", "6.0.5-3"), ("lxcfs", "6.0.4-pve1"),
                ("proxmox-widget-toolkit", "5.1.2"), ("pve-cluster", "9.0.6"), ("pve-container", "6.0.18"),
                ("pve-docs", "9.1.3"), ("pve-firmware", "3.17-2"), ("pve-qemu-kvm", "10.1.2-3"),
                ("qemu-server", "9.1.0")]
        for name, ver in pkgs:
            _print(f"{name}: {ver}")
        return 0
    return _err(f"Unknown option: {argv[0].lstrip('-')}\n400 unable to parse option\npveversion [OPTIONS]")


def nvidia_modprobe_main(argv: list[str]) -> int:
    """NVIDIA's option parsing and actions (simulator.gpu.modprobe); `-u -c0` makes the uvm nodes and clears the
    `missing_uvm` fault, `-u` alone only loads the module."""
    from simulator.gpu import modprobe
    from simulator.gpu.profiles import get_profile
    from simulator.pve import hardware

    hp = current_host()
    try:
        req = modprobe.parse(argv)
    except modprobe.Usage as exc:
        return modprobe.main_usage(exc)
    if {"h", "v"} & req.flags:
        _print("nvidia-modprobe:  version " + hp.load().driver_version)
        return 0
    cfg = hp.load()

    def load_uvm(create_nodes: bool) -> None:
        if not create_nodes:
            hardware.load_uvm_module(hp.dir, cfg)
            return
        hardware.set_uvm(hp.dir, cfg, present=True)

        def clear(c: Any) -> None:
            c.faults.missing_uvm = False

        hp.update(clear)

    return modprobe.run(req, load_uvm, hp.fs, get_profile(cfg.gpu_profile).caps_major)


def nvidia_persistenced_main(argv: list[str]) -> int:
    """NVIDIA's daemon at its start: NVML makes /dev/nvidiactl and every GPU's node (not nvidia-uvm's, modeset's or
    the caps'); the real one then forks into the background (its unit is Type=forking), which the stand-in need not."""
    from simulator.gpu import modprobe
    from simulator.gpu.profiles import get_profile

    hp = current_host()
    profile = get_profile(hp.load().gpu_profile)
    modprobe.nvml_makes_nodes(hp.fs, [g.minor for g in profile.gpus], profile.caps_major)
    return 0


def _stuck_links(cfg: HostConfig) -> set[str]:
    """lspci bus ids (`75:00.0`) of the GPUs the `link` knob holds at Gen2."""
    from simulator.gpu.health import per_gpu
    from simulator.gpu.profiles import get_profile

    gpus = get_profile(cfg.gpu_profile).gpus
    return {gpus[i].bus_id[9:].lower() for i, mode in per_gpu(cfg.faults.link).items()
            if mode == "stuck-gen2" and i < len(gpus)}


def lspci_main(argv: list[str]) -> int:
    from simulator.pve import hardware

    cfg = current_host().load()
    verbose = sum(a.count("v") for a in argv if re.fullmatch(r"-v+", a))
    numeric = any(a in ("-n", "-nn") for a in argv)
    domain = "-D" in argv
    vendor = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-d"), None)
    slot = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-s"), None)
    blocks = [b for b in re.split(r"\n\s*\n", hardware.lspci_text(cfg)) if b.strip()]
    devices = {d["id"][5:]: d for d in hardware.pci_devices(cfg)}
    stuck = _stuck_links(cfg)
    for block in blocks:
        head, _, body = block.partition("\n")
        bus = head.split()[0]
        if bus in stuck:  # the `link=GPU:stuck-gen2` knob: LnkSta at 5GT/s, whatever the load
            body = re.sub(r"(LnkSta:\s+)Speed [\d.]+GT/s( \(downgraded\))?", r"\1Speed 5GT/s (downgraded)", body)
        if vendor and (vendor.split(":")[0].lower() != "10de" or bus not in devices):
            continue
        if slot and not bus.endswith(slot.split(":", 1)[-1] if slot.count(":") > 1 else slot):
            continue
        if numeric and bus in devices:
            d = devices[bus]
            head = f"{bus} 3D controller [0302]: NVIDIA Corporation {d['device_name']} " \
                   f"[10de:{d['device'][2:]}] (rev a1)"
        if domain:
            head = f"0000:{head}"
        _print(head if not verbose else f"{head}\n{body}\n")
    return 0


def vzdump_main(argv: list[str]) -> int:
    """Runs in the foreground like `vzdump` on a shell: progress on stdout, errors on stderr."""
    from simulator.pve import vzdump
    from simulator.pve.lxc import Node

    if not argv or argv[0] in ("help", "-h", "--help"):
        _print(f"USAGE: {vzdump.USAGE}")
        return 0
    hp = current_host()
    node = Node(hp)
    try:
        req = vzdump.parse_args(argv)
        _print(f"INFO: starting new backup job: vzdump {' '.join(argv)}")
        vzdump.dump(node, req, _print, *_vzdump_stop_start(node, req.vmid))
    except PveError as exc:
        if exc.status == 500:
            _print(f"ERROR: Backup of VM {argv[0]} failed - {exc.message}")
        return _api_error(exc)
    _print("INFO: Backup job finished successfully")
    return 0


def _vzdump_stop_start(node: Any, vmid: int) -> tuple[Any, Any]:
    """VZDump::LXC's stop_vm/start_vm call PVE::LXC::vm_stop/vm_start directly: inside the backup task, past the
    `backup` lock that vzdump itself holds (no lock check, no task of their own)."""
    from simulator.pve.lxc import TaskError

    def run(action: Any) -> None:
        try:
            action()
        except TaskError as exc:
            raise PveError(str(exc)) from None

    def stop() -> None:
        run(lambda: node.stop(vmid, _print, graceful_timeout_s=600, force=True, lock_check="skip"))

    def start() -> None:
        run(lambda: node.start(vmid, _print, skiplock=True))

    return stop, start


def main(argv: list[str]) -> int:
    tools = {"pct": pct_main, "vzdump": vzdump_main, "pvesh": pvesh_main, "pveversion": pveversion_main,
             "pveum": pveum_main, "nvidia-modprobe": nvidia_modprobe_main, "lspci": lspci_main,
             "nvidia-persistenced": nvidia_persistenced_main}
    if not argv or argv[0] not in tools:
        return _err(f"usage: python -m simulator.pve.cli {{{','.join(tools)}}} ARGS...")
    try:
        return tools[argv[0]](argv[1:])
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
