"""What the NVIDIA `.run` stand-in does inside a real container (it runs there with the container's python3).

Why a stand-in: the real installer needs a real GPU kernel module. This one behaves like it where the tool can
tell: the real option names, the refusal to touch kernel modules inside a container, the userspace files at
its own version (libnvidia-ml / libcuda and their .so.1 links, nvidia-smi, nvidia-installer), the log in
/var/log/nvidia-installer.log, and `--uninstall` / a rerun at another version replacing them.
Stdlib only and free of repo imports except simulator.ctside, simulator.derived and simulator.gpu, which the
.run carries.

Options checked against nvidia-installer's option table and history: `--no-kernel-module` is the original
name; 515.43.04 added `--no-kernel-modules` (the same option, named for the several modules of newer drivers;
NVIDIA's note in open-gpu-kernel-modules PR #324), so both are accepted. Also `-s/--silent`,
`-a/--accept-license`, `-q/--no-questions`, `--ui=none`, `--uninstall`, `-v/--version`, and the no-op options
the tool passes (`--no-dkms`, `--no-systemd`, …). Anything else is refused, as the real installer refuses an
unknown option.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

LIBDIR = "usr/lib/x86_64-linux-gnu"
#: Where the replay code (simulator.gpu + captures) that nvidia-smi runs lives in the container.
SIMDIR = LIBDIR + "/nvidia-sim"
MANIFEST = "var/lib/nvidia/deploy-sim-manifest.json"
LOG = "var/log/nvidia-installer.log"
LIBS = ("libnvidia-ml.so", "libcuda.so", "libnvidia-ptxjitcompiler.so")

KMOD_LOADED = (
    "ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel.  This may be because it "
    "is in use (for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon), but this may also "
    "happen if your kernel was configured without support for module unloading.  Please be sure to exit any "
    "programs that may be using the GPU(s) before attempting to upgrade your driver.  If no GPU-based programs are "
    "running, you know that your kernel supports module unloading, and you still receive this message, then an "
    "error may have occurred that has corrupted an NVIDIA kernel module's usage count, for which the simplest "
    "remedy is to reboot your computer.")
FAILED = ("ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You "
          "may find suggestions on fixing installation problems in the README available on the Linux driver "
          "download page at www.nvidia.com.")

SMI_STUB = """#!/usr/bin/python3 -S
# nvidia-smi of the deploy simulator: replays real captures (installed by the NVIDIA .run stand-in, @VERSION@)
import os
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(root, "@SIMDIR@"))
from simulator.gpu.smi import main

sys.exit(main(ct_root=root))
"""

INSTALLER_STUB = """#!/usr/bin/python3 -S
# nvidia-installer of the deploy simulator (installed by the NVIDIA .run stand-in, @VERSION@)
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root / "@SIMDIR@"))
from simulator.software.nvrun import main

sys.exit(main(sys.argv[1:], "@VERSION@", root, installed=True))
"""


@dataclass(frozen=True)
class Options:
    silent: bool = False
    no_kernel_module: bool = False
    uninstall: bool = False
    version: bool = False
    unknown: str | None = None


FLAGS = {"--no-kernel-module": "no_kernel_module", "--no-kernel-modules": "no_kernel_module", "--silent": "silent",
         "-s": "silent", "--uninstall": "uninstall", "-v": "version", "--version": "version"}
IGNORED = ("--accept-license", "-a", "--no-questions", "-q", "--ui=none", "--disable-nouveau", "--no-x-check",
           "--no-nouveau-check", "--no-drm", "--install-libglvnd", "--no-install-libglvnd", "--dkms", "--no-dkms",
           "--no-cc-version-check", "--no-kernel-module-source", "--no-nvidia-modprobe", "--no-distro-scripts",
           "--no-systemd", "--no-opengl-files", "--no-install-compat32-libs", "--no-peermem", "--no-backup",
           "--no-rpms", "--no-check-for-alternate-installs", "--no-libglx-indirect", "--no-wine-files",
           "--no-precompiled-interface", "--no-glvnd-egl-client", "--no-glvnd-glx-client")


def parse(argv: list[str]) -> Options:
    seen: set[str] = set()
    for a in argv:
        if a in FLAGS:
            seen.add(FLAGS[a])
        elif a not in IGNORED and not a.startswith("--log-file-name="):
            return Options(unknown=a)
    return Options(silent="silent" in seen, no_kernel_module="no_kernel_module" in seen,
                   uninstall="uninstall" in seen, version="version" in seen)


def _log(root: Path, argv: list[str], lines: list[str]) -> None:
    path = root / LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now().strftime("%a %b %d %H:%M:%S %Y")
    head = [f"nvidia-installer log file '/{LOG}'", f"creation time: {now}", "installer version: deploy-sim", "",
            "PATH: " + os.environ.get("PATH", ""), "", "nvidia-installer command line:", "    ./nvidia-installer",
            *[f"    {a}" for a in argv], ""]
    path.write_text("\n".join(head + lines) + "\n")


def installed_version(root: Path) -> str | None:
    try:
        return str(json.loads((root / MANIFEST).read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def uninstall(root: Path) -> str | None:
    """Remove every file the last install recorded; return the version that was installed."""
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    for rel in manifest.get("files", []):
        p = root / rel
        if p.is_symlink() or p.is_file():
            p.unlink()
    shutil.rmtree(root / SIMDIR, ignore_errors=True)
    (root / MANIFEST).unlink(missing_ok=True)
    return str(manifest.get("version"))


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def install(root: Path, version: str, payload: Path) -> list[str]:
    """Copy the replay code, write the libraries at `version` with their links, the stubs and the manifest."""
    files: list[str] = []
    lib = root / LIBDIR
    lib.mkdir(parents=True, exist_ok=True)
    for name in LIBS:
        real = lib / f"{name}.{version}"
        real.write_text(f"deploy-sim placeholder for {name}.{version} (no GPU code)\n")
        files.append(f"{LIBDIR}/{real.name}")
        for link_name in (f"{name}.1", name) if name == "libcuda.so" else (f"{name}.1",):
            link = lib / link_name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(real.name if link_name.endswith(".1") else f"{name}.1")
            files.append(f"{LIBDIR}/{link_name}")
    shutil.rmtree(root / SIMDIR, ignore_errors=True)
    shutil.copytree(payload / "simulator", root / SIMDIR / "simulator")
    for rel, text in (("usr/bin/nvidia-smi", SMI_STUB), ("usr/bin/nvidia-installer", INSTALLER_STUB)):
        _write(root / rel, text.replace("@VERSION@", version).replace("@SIMDIR@", SIMDIR), 0o755)
        files.append(rel)
    uninstaller = root / "usr/bin/nvidia-uninstall"
    if uninstaller.is_symlink() or uninstaller.exists():
        uninstaller.unlink()
    uninstaller.symlink_to("nvidia-installer")
    files.append("usr/bin/nvidia-uninstall")
    _write(root / MANIFEST, json.dumps({"version": version, "files": files}, indent=1) + "\n")
    return files


def main(argv: list[str], version: str, root: Path, payload: Path | None = None, installed: bool = False) -> int:
    """Run as `<file>.run ARGS` (payload set) or as the installed /usr/bin/nvidia-installer (installed=True)."""
    say = print
    opts = parse(argv)
    if opts.unknown:
        say(f'ERROR: Unrecognized option: "{opts.unknown}"', file=sys.stderr)
        return 1
    if opts.version:
        say(f"nvidia-installer:  version {version}")
        return 0
    if opts.uninstall or (installed and argv == []):
        was = uninstall(root)
        if was is None:
            say("ERROR: No NVIDIA driver is currently installed.", file=sys.stderr)
            return 1
        _log(root, argv, [f"Uninstalling NVIDIA driver version {was}.", "Uninstallation of existing driver: "
                          f"NVIDIA Accelerated Graphics Driver for Linux-x86_64 ({was}) is complete."])
        if not opts.silent:
            say(f"Uninstallation of existing driver: NVIDIA Accelerated Graphics Driver for Linux-x86_64 ({was}) "
                "is complete.")
        return 0
    if installed or payload is None:
        say("ERROR: nvidia-installer can only uninstall here; run the .run package to install.", file=sys.stderr)
        return 1
    if not opts.silent:
        say("Welcome to the NVIDIA Software Installer for Unix/Linux")
    if not opts.no_kernel_module:
        _log(root, argv, [KMOD_LOADED, FAILED])
        say(KMOD_LOADED, file=sys.stderr)
        say(FAILED, file=sys.stderr)
        return 1
    lines = []
    was = installed_version(root)
    if was is not None:
        lines.append(f"There appears to already be a driver installed on your system (version: {was}).  As part "
                     f"of installing this driver (version: {version}), the existing driver will be uninstalled.")
        uninstall(root)
    install(root, version, payload)
    lines += ["Skipping the kernel module (--no-kernel-module): the host's module is used.",
              f"Installing 'NVIDIA Accelerated Graphics Driver for Linux-x86_64' ({version}): userspace only.",
              f"Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: {version}) "
              "is now complete."]
    _log(root, argv, lines)
    if not opts.silent:
        for line in lines:
            say(line)
    return 0
