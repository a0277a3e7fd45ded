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
#: What a state store URL may hold in an Environment= value (a libpq URL: no space, quote, backslash or `$`).
_URL_SAFE = re.compile(r"postgres(ql)?://[A-Za-z0-9_@+=:,./?&%~\[\]-]*")


def watch_unit_name(group: str) -> str:
    if not _GROUP.fullmatch(group):
        raise ConfigError(f"group {group!r} cannot name a systemd unit",
                          fix="use a group name of letters, digits, '.', '_' and '-'")
    return f"deploy-watch-{group}.service"


def render_watch_unit(*, program: Sequence[str], group: str, interval_s: float, drain_timeout_s: float,
                      inventory: str, state_dir: str, reboot_timeout_s: float, state_url: str | None = None,
                      state_password_file: str | None = None) -> str:
    """The unit: `program` (the absolute argv that starts deploy, e.g. [venv python, -m, orchestrator]) + `watch group
    G --interval … --drain-timeout …`, with the inventory and state directory as absolute paths (a service has no
    working directory or $HOME of the operator's shell). A team store (docs/team.md) goes in by its URL (which
    carries no password: state/pg.py refuses one) and its password file's absolute path, never the password."""
    name = watch_unit_name(group)
    for what, path in (("inventory directory", inventory), ("state directory", state_dir)):
        if not _ENV_SAFE.fullmatch(path):
            raise ConfigError(f"the {what} {path!r} cannot go into the unit's Environment= as it is",
                              fix="use absolute paths of letters, digits and _@+=:,./- (no spaces or %)")
    if state_password_file is not None and not _ENV_SAFE.fullmatch(state_password_file):
        raise ConfigError(f"the state store password file {state_password_file!r} cannot go into the unit's "
                          "Environment= as it is", fix="use an absolute path of letters, digits and _@+=:,./-")
    if state_url is not None and not _URL_SAFE.fullmatch(state_url):
        raise ConfigError("the state store URL cannot go into the unit's Environment= as it is (a space, quote, "
                          "backslash or $ in it)", fix="percent-encode those characters in the URL")
    argv = [*program, "watch", "group", group, "--interval", f"{interval_s:g}", "--drain-timeout",
            f"{drain_timeout_s:g}"]
    stop = int(interval_s + drain_timeout_s + reboot_timeout_s + 60)
    return render_template("deploy-watch.service.j2", unit=name, group=group, interval=f"{interval_s:g}",
                           inventory=inventory, state_dir=state_dir, argv=argv, stop_timeout_s=stop,
                           state_url=None if state_url is None else state_url.replace("%", "%%"),
                           state_password_file=state_password_file)
