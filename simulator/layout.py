"""The layout contract of docs/simulator.md as plain string constants, importable without any other module.

Kept free of imports on purpose (`os` is loaded by every interpreter before any module): the SSH session shell
reads it on every simulated command, and every millisecond of import time is paid per command. `simulator.config`
re-exports these (as Paths).
"""

import os

ROOT_ENV = "DEPLOY_SIM_ROOT"
HOST_ENV = "DEPLOY_SIM_HOST"
DEFAULT_ROOT = "/var/lib/deploy-sim"


def sim_root_dir() -> str:
    """The state root: $DEPLOY_SIM_ROOT (inside views this is the VIEW_ROOT alias), else the default."""
    return os.environ.get(ROOT_ENV) or DEFAULT_ROOT


def current_host_dir() -> str:
    """The directory of the host this process runs on ($DEPLOY_SIM_ROOT/hosts/$DEPLOY_SIM_HOST): set in every
    session of a simulated host and in its stand-in processes."""
    name = os.environ.get(HOST_ENV)
    if not name:
        raise RuntimeError(f"${HOST_ENV} is not set: not running inside a simulated host")
    return os.path.join(sim_root_dir(), "hosts", name)


#: Highest host number: the addresses below stay inside 127.0.0.0/8 (see host_address).
MAX_HOST_NUMBER = 253 + 254 * 255


def host_address(index: int) -> str:
    """sim-N listens on 127.0.0.(N+1) up to sim-253; fleets beyond go on in 127.0.1.1-254, 127.0.2.1-254, ...
    (sim-254 is 127.0.1.1), skipping the .0 and .255 addresses. Here, not in the manager, so that the test suite's
    number search (tests/sim_hosts.py) uses the same mapping without importing the simulator."""
    if index <= 253:
        return f"127.0.0.{index + 1}"
    block, last = divmod(index - 254, 254)
    return f"127.0.{block + 1}.{last + 1}"

#: Inside the host view (SSH sessions) the simulator's own files are reached through these aliases, because the
#: view binds other directories over /root and /tmp, where the Python install, the repo or the sim root may live.
VIEW_ALIAS = "/run/deploy-sim"
VIEW_PY = VIEW_ALIAS + "/py"  # sys.base_prefix
VIEW_VENV = VIEW_ALIAS + "/venv"  # sys.prefix when running from a virtualenv
VIEW_REPO = VIEW_ALIAS + "/repo"  # the directory holding the `orchestrator` package
VIEW_ROOT = VIEW_ALIAS + "/root"  # the sim root; DEPLOY_SIM_ROOT points here inside views
#: Interpreter for the stand-ins in <root>/bin/host ($DEPLOY_SIM_PYTHON): a sh launcher written by `sim up`.
VIEW_PYTHON = VIEW_ROOT + "/bin/python"
#: PATH inside a session: the host stand-ins first (<root>/bin/host through the view alias), then a PVE host's.
SESSION_PATH = f"{VIEW_ROOT}/bin/host:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def session_env(host: str) -> dict[str, str]:
    """The environment of everything that runs in a host's view: SSH sessions, boot-time units, the stand-in
    server (simulator.host.standin_server)."""
    return {"HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash", "PATH": SESSION_PATH,
            "DEPLOY_SIM_PYTHON": VIEW_PYTHON, "DEPLOY_SIM_REPO": VIEW_REPO, ROOT_ENV: VIEW_ROOT, HOST_ENV: host}

#: Host view: `fs/<src>` is bind-mounted over `<target>` by the SSH session shell (kind: dir or file).
HOST_OVERLAYS: tuple[tuple[str, str, str], ...] = (
    ("etc/pve", "/etc/pve", "dir"),
    ("proc/driver", "/proc/driver", "dir"),
    ("proc/devices", "/proc/devices", "file"),
    ("proc/cmdline", "/proc/cmdline", "file"),
    ("sys/module", "/sys/module", "dir"),
    ("etc/modprobe.d", "/etc/modprobe.d", "dir"),
    ("root", "/root", "dir"),
    ("var/lib/vz", "/var/lib/vz", "dir"),
    ("var/lib/deploy", "/var/lib/deploy", "dir"),
    # node_exporter's textfile directory (Debian's prometheus-node-exporter): deploy publishes its metrics there.
    ("var/lib/prometheus/node-exporter", "/var/lib/prometheus/node-exporter", "dir"),
    ("tmp", "/tmp", "dir"),
    # The host's own units (the stand-in `systemctl` reads them; `deploy sim reboot` starts the enabled ones) and
    # the boot id that changes at each `deploy sim reboot`: never the machine's own.
    ("etc/systemd/system", "/etc/systemd/system", "dir"),
    # udev rules deploy writes (the power unit's rule, orchestrator/render/power_unit.py): never the machine's own.
    ("etc/udev/rules.d", "/etc/udev/rules.d", "dir"),
    ("proc/sys/kernel/random/boot_id", "/proc/sys/kernel/random/boot_id", "file"),
    # /dev last: it is bound recursively after /dev/pts has been bound into fs/dev/pts.
    ("dev", "/dev", "dir"),
)

#: Written by the manager into hosts/<name>/sshd/: what the session shell needs, as `key=value` lines.
SESSION_FILE = "session.conf"


def read_session(host_dir: str) -> dict[str, str]:
    """sshd/session.conf written by the manager: name, node, real_root, python_prefix, venv_prefix, repo."""
    with open(os.path.join(host_dir, "sshd", SESSION_FILE)) as fh:
        return dict(line.rstrip("\n").split("=", 1) for line in fh if "=" in line)


#: The pid of the process that holds a host's view (simulator.host.shell hold); sessions join its namespaces.
VIEW_PID_FILE = "view.pid"
#: The sh snippet that sshd's ForceCommand sources for every session (written by simulator.host.sshd.prepare).
SESSION_SCRIPT = "session.sh"
#: Present (content: N) while the host's `ssh_drop_after` fault is set, so sessions skip host.json otherwise.
DROP_FILE = "drop-after"
