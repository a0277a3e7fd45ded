"""The NVIDIA `.run` installer stand-in placed in the host's /root (and the userspace-version bookkeeping).

Inside a container the real installer must run with --no-kernel-module (the kernel module belongs to the
host); the stand-in enforces that. One file serves both runtimes: in a real LXC container (simulator.ctside's
mounts present) it installs userspace files for real from its own payload (runfile.py, nvrun.py); in the view
runtime it records the installed userspace version where the view's nvidia-smi reads it:
<ct>/fs/opt/sim-nvidia/version (= /opt/sim-nvidia/version in the container view).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .runfile import append_payload, preamble

USERSPACE_FILE = "opt/sim-nvidia/version"

SCRIPT = r"""#!/bin/sh
# NVIDIA-Linux-x86_64-@VERSION@.run -- simulated installer (deploy sim). Real one: a makeself archive.
VERSION=@VERSION@
@PREAMBLE@silent=0; nokmod=0
for a in "$@"; do
  case "$a" in
    --silent|-s) silent=1 ;;
    --no-kernel-modules|--no-kernel-module) nokmod=1 ;;
  esac
done
echo "Verifying archive integrity... OK"
echo "Uncompressing NVIDIA Accelerated Graphics Driver for Linux-x86_64 $VERSION.................................."
if [ -n "$DEPLOY_SIM_HOST_DIR" ]; then hostdir=$DEPLOY_SIM_HOST_DIR
else hostdir=${DEPLOY_SIM_ROOT:-/var/lib/deploy-sim}/hosts/${DEPLOY_SIM_HOST:-sim-1}; fi
if [ -z "$DEPLOY_SIM_CT" ] || [ "$nokmod" = 0 ]; then
  [ "$silent" = 1 ] || echo "Welcome to the NVIDIA Software Installer for Unix/Linux"
  echo "ERROR: An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel.  This may be because it is in use (for example, by an X server, a CUDA program, or the NVIDIA Persistence Daemon), but this may also happen if your kernel was configured without support for module unloading.  Please be sure to exit any programs that may be using the GPU(s) before attempting to upgrade your driver.  If no GPU-based programs are running, you know that your kernel supports module unloading, and you still receive this message, then an error may have occurred that has corrupted an NVIDIA kernel module's usage count, for which the simplest remedy is to reboot your computer." >&2
  echo "ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.  You may find suggestions on fixing installation problems in the README available on the Linux driver download page at www.nvidia.com." >&2
  exit 1
fi
ctfs="$hostdir/ct/$DEPLOY_SIM_CT/fs"
mkdir -p "$ctfs/opt/sim-nvidia" "$ctfs/var/log"
printf '%s\n' "$VERSION" > "$ctfs/opt/sim-nvidia/version"
{ echo "nvidia-installer log file '/var/log/nvidia-installer.log'"; echo "command line:"; echo "    ./nvidia-installer $*";
  echo "Installing NVIDIA driver version $VERSION (userspace only: --no-kernel-modules)."; } > "$ctfs/var/log/nvidia-installer.log"
if [ "$silent" = 0 ]; then
  echo "Welcome to the NVIDIA Software Installer for Unix/Linux"
  echo "Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: $VERSION) is now complete."
fi
repo=${DEPLOY_SIM_REPO:-@REPO@}
[ -d /run/deploy-sim/repo/orchestrator ] && repo=/run/deploy-sim/repo
for py in "${DEPLOY_SIM_ROOT:-/nonexistent}/bin/python" /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null 2>&1; then
    PYTHONPATH="$repo" "$py" -S -m simulator.software.installer "$hostdir" "$DEPLOY_SIM_CT" "$VERSION" 2>/dev/null && break
  fi
done
exit 0
"""  # noqa: E501 - installer messages are verbatim


def installer_name(version: str) -> str:
    return f"NVIDIA-Linux-x86_64-{version}.run"


def write_installer(host_dir: Path, version: str) -> Path:
    root = host_dir / "fs" / "root"
    root.mkdir(parents=True, exist_ok=True)
    path = root / installer_name(version)
    repo = Path(__file__).resolve().parents[2]
    script = SCRIPT.replace("@PREAMBLE@", preamble()).replace("@VERSION@", version).replace("@REPO@", str(repo))
    path.write_text(append_payload(script))
    path.chmod(0o755)
    return path


def set_userspace(host_dir: Path, vmid: int, version: str | None) -> None:
    """Record the container's userspace driver: the file nvidia-smi reads, and state.json for part 1."""
    ct = host_dir / "ct" / str(vmid)
    f = ct / "fs" / USERSPACE_FILE
    if version is None:
        f.unlink(missing_ok=True)
    else:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(version + "\n")
    _update_state(ct / "state.json", version)


def _update_state(path: Path, version: str | None) -> None:
    """Set state.json's userspace_driver under part 1's lock protocol (stdlib-only fallback)."""
    try:
        from simulator.config import locked, write_json
    except ImportError:  # pragma: no cover - part 1 absent
        return
    with locked(path):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {"vmid": int(path.parent.name)}
        data["userspace_driver"] = version
        write_json(path, data, lock=False)


def main() -> int:
    """Hook for the .run script: `installer <host_dir> <vmid> <version>`."""
    host_dir, vmid, version = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    _update_state(host_dir / "ct" / str(vmid) / "state.json", version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
