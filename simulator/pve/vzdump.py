"""`vzdump VMID --mode stop`: a container's root filesystem as a `.tar.zst` archive, as PVE's backup tool writes it.

Operators use such an archive as a site template: provision one container (`deploy up --playbook provision`),
dump it into `/var/lib/vz/template/cache`, and name it as `container.ostemplate`; `pct create` unpacks it like any
template. The archive holds the rootfs plus the container's PVE config as `etc/vzdump/pct.conf`, as a real one
does. Only the `stop` mode is simulated (the default `snapshot` needs storage snapshots, `suspend` a freezer).
`--exclude-path PATTERN` (repeatable; each value split like a shell line) and the standard excludes
(`--stdexcludes`, on by default: /tmp/?*, /var/tmp/?*, /var/run/?*.pid) reach tar as PVE's VZDump::LXC passes them:
a pattern starting with `/` is anchored at the container's root (`--exclude=./PATTERN`), others match anywhere; a
trailing slash matches nothing with tar, and vzdump warns about it. Bind mount points (`mpN` of a host directory)
are never in the archive.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.pve.lxc import Node, PveError

USAGE = "vzdump {<vmid>} [OPTIONS]"
MODES = ("snapshot", "suspend", "stop")
COMPRESSORS = {"zstd": ".tar.zst", "0": ".tar"}
DEFAULT_DUMPDIR = "/var/lib/vz/dump"
STD_EXCLUDES = ("/tmp/?*", "/var/tmp/?*", "/var/run/?*.pid")


@dataclass(frozen=True)
class DumpRequest:
    vmid: int
    mode: str = "snapshot"
    compress: str = "0"
    dumpdir: str = DEFAULT_DUMPDIR
    exclude_path: tuple[str, ...] = ()
    stdexcludes: bool = True

    @property
    def findexcl(self) -> list[str]:
        """PVE::VZDump's exclusion list: --exclude-path, then the standard excludes."""
        return [*self.exclude_path, *(STD_EXCLUDES if self.stdexcludes else ())]


def parse_args(argv: list[str]) -> DumpRequest:
    """vzdump's own options (pve-manager PVE::VZDump); refused like the real tool's parameter check."""
    vmids: list[int] = []
    opts: dict[str, str] = {}
    excludes: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg.startswith("--"):
            key, sep, value = arg[2:].partition("=")
            if key not in ("mode", "compress", "dumpdir", "storage", "exclude-path", "stdexcludes"):
                raise PveError(f"Unknown option: {key}\n400 unable to parse option\n{USAGE}", 400)
            value = value if sep else next(it, "")
            if key == "exclude-path":
                excludes += shlex.split(value)
            else:
                opts[key] = value
        elif arg.isdigit():
            vmids.append(int(arg))
        else:
            raise PveError(f"400 Parameter verification failed.\nvmid: invalid format - value '{arg}' does not "
                           f"look like a valid VM ID\n{USAGE}", 400)
    if len(vmids) != 1:
        raise PveError(f"400 Parameter verification failed.\nvmid: exactly one VM ID (the simulator dumps one "
                       f"container per call)\n{USAGE}", 400)
    mode = opts.get("mode", "snapshot")
    if mode not in MODES:
        raise PveError(f"400 Parameter verification failed.\nmode: value '{mode}' does not have a value in the "
                       f"enumeration '{', '.join(MODES)}'\n{USAGE}", 400)
    compress = opts.get("compress", "0")
    if compress not in COMPRESSORS:  # PVE also takes 1 (= lzo), gzip and lzo
        raise PveError(f"400 Parameter verification failed.\ncompress: simulator: only 0 and zstd are "
                       f"simulated, not '{compress}'\n{USAGE}", 400)
    storage = opts.get("storage")
    if storage not in (None, "local"):
        raise PveError(f"storage '{storage}' does not exist", 400)
    std = opts.get("stdexcludes", "1")
    if std not in ("0", "1"):
        raise PveError(f"400 Parameter verification failed.\nstdexcludes: type check ('boolean') failed - got "
                       f"'{std}'\n{USAGE}", 400)
    return DumpRequest(vmids[0], mode, compress, opts.get("dumpdir", DEFAULT_DUMPDIR), tuple(excludes), std == "1")


def archive_name(vmid: int, compress: str, when: float) -> str:
    return f"vzdump-lxc-{vmid}-{time.strftime('%Y_%m_%d-%H_%M_%S', time.localtime(when))}{COMPRESSORS[compress]}"


def dump(node: Node, req: DumpRequest, log: Callable[[str], None],
         stop: Callable[[], None], start: Callable[[], None]) -> Path:
    """Write the archive; a running container is shut down for it and started again (mode stop)."""
    conf, _digest = node.read(req.vmid)
    running = node.running(req.vmid)
    if running and req.mode != "stop":
        raise PveError(f"simulator: only `--mode stop` is simulated for a running container (asked: {req.mode})")
    dumpdir = Path(req.dumpdir)
    if not dumpdir.is_dir():
        raise PveError(f"unable to access dump directory '{req.dumpdir}'")
    t0 = time.time()
    target = dumpdir / archive_name(req.vmid, req.compress, t0)
    log(f"INFO: Starting Backup of VM {req.vmid} (lxc)")
    log(f"INFO: status = {'running' if running else 'stopped'}")
    node.set_lock(req.vmid, "backup")  # PVE::VZDump: "lock VM (prevent config changes)", in every mode
    try:
        return _dump_locked(node, req, conf, running, target, t0, log, stop, start)
    finally:
        node.remove_lock(req.vmid, "backup")


def _dump_locked(node: Node, req: DumpRequest, conf: Any, running: bool, target: Path, t0: float,
                 log: Callable[[str], None], stop: Callable[[], None], start: Callable[[], None]) -> Path:
    """The backup proper, while the CT holds the `backup` lock."""
    rt = node.lxc
    log(f"INFO: backup mode: {req.mode}")
    log(f"INFO: CT Name: {conf.options.get('hostname', f'CT{req.vmid}')}")
    log("INFO: including mount point rootfs ('/') in backup")
    for key in sorted((k for k in conf.options if re.fullmatch(r"mp\d+", k)), key=lambda k: int(k[2:])):
        source, _, rest = conf.options[key].partition(",")
        mount = dict(p.split("=", 1) for p in rest.split(",") if "=" in p).get("mp", "?")
        if source.startswith("/"):  # a host directory: PVE's type bind, never backed up
            log(f"INFO: excluding bind mount point {key} ('{mount}') from backup (not a volume)")
    if running:
        log("INFO: stopping virtual guest")
        stop()
    rootfs = rt.dirs(req.vmid).rootfs
    try:
        with tempfile.TemporaryDirectory(prefix="vzdump-") as tmp:
            vz = Path(tmp) / "etc" / "vzdump"
            vz.mkdir(parents=True)
            (vz / "pct.conf").write_text(conf.render())
            log(f"INFO: creating vzdump archive '{target}'")
            part = target.with_name(f".{target.name}.tmp")
            for pattern in req.findexcl:
                if pattern.endswith("/"):
                    log(f"WARN: tar does not match exclusion with a trailing slash '{pattern}'")
            argv = ["tar", "--numeric-owner", "--sparse", "-cpf", str(part), "-C", tmp, "./etc/vzdump/pct.conf",
                    "-C", str(rootfs), "--no-anchored",
                    *(f"--exclude={p}" for p in req.findexcl if not p.startswith("/")), "--anchored",
                    *(f"--exclude=.{p}" for p in req.findexcl if p.startswith("/")), "."]
            if req.compress == "zstd":
                argv.insert(1, "--zstd")
            res = subprocess.run(argv, capture_output=True, text=True)
            if res.returncode not in (0, 1):  # 1: a file changed while read; PVE's tar warns and goes on too
                part.unlink(missing_ok=True)
                raise PveError(f"command 'tar' failed: {res.stderr.strip()[-300:]}")
            os.replace(part, target)
    finally:
        if running:
            log("INFO: restarting vm")
            start()
    log(f"INFO: archive file size: {target.stat().st_size / 2**20:.0f}MB")
    log(f"INFO: Finished Backup of VM {req.vmid} ({time.strftime('%H:%M:%S', time.gmtime(time.time() - t0))})")
    return target
