"""The systemd unit that runs `deploy watch group G` on the operator machine (pure: values in, the unit's text out).

Why a long-running service rather than a timer on each PVE host: the watch must reach the router and every host of
the group, and it holds its own record of the hosts it cordoned (`$DEPLOY_STATE_DIR/watch/G.json`), which only a
single loop on the machine that runs deploy has; a host-side timer would see one host and no router.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.errors import ConfigError
from orchestrator.render.files import render_template

_GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: What an Environment= value may hold unquoted (systemd resolves `%` specifiers there, and splits on spaces).
_ENV_SAFE = re.compile(r"/[A-Za-z0-9_@+=:,./-]*")


def watch_unit_name(group: str) -> str:
    if not _GROUP.fullmatch(group):
        raise ConfigError(f"group {group!r} cannot name a systemd unit",
                          fix="use a group name of letters, digits, '.', '_' and '-'")
    return f"deploy-watch-{group}.service"


def render_watch_unit(*, program: Sequence[str], group: str, interval_s: float, drain_timeout_s: float,
                      inventory: str, state_dir: str, reboot_timeout_s: float) -> str:
    """The unit: `program` (the absolute argv that starts deploy, e.g. [venv python, -m, orchestrator]) + `watch group
    G --interval … --drain-timeout …`, with the inventory and state directory as absolute paths (a service has no
    working directory or $HOME of the operator's shell)."""
    name = watch_unit_name(group)
    for what, path in (("inventory directory", inventory), ("state directory", state_dir)):
        if not _ENV_SAFE.fullmatch(path):
            raise ConfigError(f"the {what} {path!r} cannot go into the unit's Environment= as it is",
                              fix="use absolute paths of letters, digits and _@+=:,./- (no spaces or %)")
    argv = [*program, "watch", "group", group, "--interval", f"{interval_s:g}", "--drain-timeout",
            f"{drain_timeout_s:g}"]
    stop = int(interval_s + drain_timeout_s + reboot_timeout_s + 60)
    return render_template("deploy-watch.service.j2", unit=name, group=group, interval=f"{interval_s:g}",
                           inventory=inventory, state_dir=state_dir, argv=argv, stop_timeout_s=stop)
