"""Where the metrics go on a PVE host, and the shell that writes them there (pure: text in, script out).

node_exporter's textfile collector reads `*.prom` from its `--collector.textfile.directory` (Debian's
prometheus-node-exporter: /var/lib/prometheus/node-exporter) at each scrape, so a half-written file must never
be seen: each file is written beside its final name under a name the collector skips (`.NAME.<random>`), then
renamed (atomic in one directory). The `.prom` file is 0644 (node_exporter runs as its own user) and holds no
secret; the carried state is 0600 beside the host lock.
"""

from __future__ import annotations

import shlex

TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
PROM_NAME = "deploy.prom"
PROM_PATH = f"{TEXTFILE_DIR}/{PROM_NAME}"
STATE_DIR = "/var/lib/deploy"
STATE_PATH = f"{STATE_DIR}/metrics-state.json"
#: The prefix of the line the script prints on stderr when a file could not be written.
FAILED = "deploy-metrics: cannot write"


def _write(directory: str, name: str, body: str, umask: str) -> str:
    """One file written atomically in a directory another user may control (the textfile directory is the
    `prometheus` user's on Debian). Before issue 50 a fixed temporary name (`.deploy.prom.tmp`), written through and
    chmodded by name, let a planted symlink make root overwrite a root-only file and leave it 0644. Now: an
    unpredictable name (`mktemp -u`), created exclusively (`set -C`: O_EXCL, so no planted link or file is opened),
    its mode from the umask at creation (no chmod by name, which follows a link), and `mv -fT` (rename(2): a link at
    either name is moved or replaced, never followed; a directory planted at the final name is not entered)."""
    d, final = shlex.quote(directory), shlex.quote(f"{directory}/{name}")
    pattern = shlex.quote(f".{name}.XXXXXXXXXX")
    write = (f"mkdir -p {d} && t=$(mktemp -u -p {d} {pattern}) && ( set -C; umask {umask}; printf '%s' "
             f"{shlex.quote(body)} > \"$t\" ) && mv -fT \"$t\" {final}")
    return f"{{ {write}; }} || {{ rm -f \"${{t:-}}\"; echo {shlex.quote(f'{FAILED} {directory}/{name}')} >&2; }}\n"


def publish_script(prom_text: str, state_json: str, *, textfile_dir: str = TEXTFILE_DIR,
                   state_dir: str = STATE_DIR) -> str:
    """Shell lines that write the `.prom` file and the carried state, each atomically; a failure is reported on
    stderr (FAILED …) and never stops the script it is part of (the lock's release). The directories are
    parameters for tests only."""
    return "( umask 022\n" + _write(textfile_dir, PROM_NAME, prom_text, "022") + \
        _write(state_dir, "metrics-state.json", state_json, "077") + ")\n"


def state_command() -> str:
    """The fact that reads the carried state back (empty when there is none yet)."""
    return f"cat {shlex.quote(STATE_PATH)} 2>/dev/null || true"
