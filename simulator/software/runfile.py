"""The self-contained part of the `.run` stand-in: a shell preamble for real containers and its payload.

Why self-contained: the tool pushes the host's .run into a bare container and runs it there, where neither this
repo nor any venv exists. Like the real makeself archive, the file carries what it installs: a base64 zip of
simulator.ctside, simulator.derived, simulator.gpu (the replay code and captures nvidia-smi needs) and
simulator.software.nvrun, unpacked by the container's own /usr/bin/python3 (stdlib only).
"""

from __future__ import annotations

import base64
import io
import zipfile
from functools import cache
from pathlib import Path

from simulator import ctside

SIM = Path(__file__).resolve().parents[1]
MARKER = "__DEPLOY_SIM_PAYLOAD__"
#: Package __init__ files of the payload: empty, so nothing outside the payload is imported.
STUB_INITS = ("simulator/__init__.py", "simulator/software/__init__.py")

# Runs in the container: find the payload after the last marker line, unpack it, hand over to nvrun.
BOOT = (
    "import base64,io,os,shutil,sys,tempfile,zipfile\n"
    "from pathlib import Path\n"
    "data=open(sys.argv[1],\"rb\").read().rsplit(b\"\\n" + MARKER + "\\n\",1)[1]\n"
    "d=tempfile.mkdtemp(prefix=\"nvidia-installer.\")\n"
    "zipfile.ZipFile(io.BytesIO(base64.b64decode(data))).extractall(d)\n"
    "sys.path.insert(0,d)\n"
    "from simulator.software import nvrun\n"
    "root=Path(os.environ.get(\"DEPLOY_SIM_CT_ROOT\") or \"/\")\n"
    "rc=nvrun.main(sys.argv[2:],os.environ[\"NV_SIM_VERSION\"],root,Path(d))\n"
    "shutil.rmtree(d,True)\n"
    "sys.exit(rc)\n"
)

PREAMBLE = """ct_root=${DEPLOY_SIM_CT_ROOT:-}
if [ -f "$ct_root@VMID_FILE@" ]; then
  # A real LXC container of the simulated host: install for real (see simulator/software/nvrun.py).
  echo "Verifying archive integrity... OK"
  echo "Uncompressing NVIDIA Accelerated Graphics Driver for Linux-x86_64 $VERSION.................................."
  if [ ! -x /usr/bin/python3 ]; then
    echo "ERROR: this simulated installer needs /usr/bin/python3 in the container (apt-get install python3)." >&2
    exit 1
  fi
  NV_SIM_VERSION=$VERSION exec /usr/bin/python3 -S -c '@BOOT@' "$0" "$@"
fi
"""


def payload_files() -> dict[str, bytes]:
    """The payload's files by path: what the `.run` unpacks in the container before nvrun installs."""
    files = {name: b"" for name in STUB_INITS}
    for module in ("ctside.py", "derived.py"):  # stdlib-only modules simulator.gpu imports
        files[f"simulator/{module}"] = (SIM / module).read_bytes()
    files["simulator/software/nvrun.py"] = (SIM / "software" / "nvrun.py").read_bytes()
    for p in sorted((SIM / "gpu").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            files[p.relative_to(SIM.parent).as_posix()] = p.read_bytes()
    return files


@cache
def payload() -> str:
    """The base64 zip appended to the .run after the marker line."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in payload_files().items():
            zf.writestr(zipfile.ZipInfo(name, (2025, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
    return base64.encodebytes(buf.getvalue()).decode()


def preamble() -> str:
    """Shell lines that divert to the real-container install when the ctside mounts are present."""
    if "'" in BOOT:
        raise AssertionError("BOOT must not contain a single quote (it is single-quoted in sh)")
    return PREAMBLE.replace("@VMID_FILE@", ctside.VMID_FILE).replace("@BOOT@", BOOT)


def append_payload(script: str) -> str:
    """`script` (which must end with an exit) followed by the marker line and the payload."""
    return script.rstrip("\n") + f"\n{MARKER}\n" + payload()
