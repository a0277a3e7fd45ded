"""The NVIDIA `.run` installer stand-in placed in the host's /root.

In a real LXC container of the simulated host (simulator.ctside's mounts present) it installs userspace files
for real from its own payload (runfile.py, nvrun.py), and refuses to build kernel modules there unless told not
to. Run on the host itself it refuses as the real one does while the loaded `nvidia` module is in use.
"""

from __future__ import annotations

from pathlib import Path

from .runfile import append_payload, preamble

SCRIPT = r"""#!/bin/sh
# NVIDIA-Linux-x86_64-@VERSION@.run -- simulated installer (deploy sim). Real one: a makeself archive.
VERSION=@VERSION@
@PREAMBLE@silent=0
for a in "$@"; do
  case "$a" in
    --silent|-s) silent=1 ;;
  esac
done
echo "Verifying archive integrity... OK"
echo "Uncompressing NVIDIA Accelerated Graphics Driver for Linux-x86_64 $VERSION.................................."
[ "$silent" = 1 ] || echo "Welcome to the NVIDIA Software Installer for Unix/Linux"
echo "ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel.  This may be because it is in use (for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon), but this may also happen if your kernel was configured without support for module unloading.  Please be sure to exit any programs that may be using the GPU(s) before attempting to upgrade your driver.  If no GPU-based programs are running, you know that your kernel supports module unloading, and you still receive this message, then an error may have occurred that has corrupted an NVIDIA kernel module's usage count, for which the simplest remedy is to reboot your computer." >&2
echo "ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You may find suggestions on fixing installation problems in the README available on the Linux driver download page at www.nvidia.com." >&2
exit 1
"""  # noqa: E501 - installer messages are verbatim


def installer_name(version: str) -> str:
    return f"NVIDIA-Linux-x86_64-{version}.run"


def write_installer(host_dir: Path, version: str) -> Path:
    root = host_dir / "fs" / "root"
    root.mkdir(parents=True, exist_ok=True)
    path = root / installer_name(version)
    script = SCRIPT.replace("@PREAMBLE@", preamble()).replace("@VERSION@", version)
    path.write_text(append_payload(script))
    path.chmod(0o755)
    return path
