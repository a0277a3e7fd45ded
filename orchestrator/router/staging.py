"""What a router migration (sglang-router 0.3.2 → smg, router/migrate.py) leaves in the router's container, and the
scripts that make and undo it. Pure.

Why a staging unit and a nat redirect: the router's unit cannot be restarted under a new package without dropping
the requests in flight. smg starts beside the old router on a port of its own (STAGING_OFFSET above the public
port, its metrics likewise), then an nftables nat table sends NEW connections to the public port there while the
connections the old router holds stay on it. Only a SYN without ACK is redirected: a plain `redirect` makes
conntrack pick up a connection opened before the table existed mid-stream and NAT its next packet to the staging
port, where no such connection exists, so it is reset (checked in an unprivileged simulated CT, docs/fleet.md
"Migrating a running router to smg"). Two chains: `prerouting` for clients on the LAN, `output` for clients in the
container itself (`ip daddr 127.0.0.1` only: the router's own connections to workers and a check sent to the
container's LAN address from inside must not be redirected).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from orchestrator.flags import FlagSchema
from orchestrator.inventory.models import RouterSpec
from orchestrator.router.release import exported_metrics_port
from orchestrator.router.render import CONF_DIR, LAUNCHER_PATH, RouterBundle, render_router

UNIT = "sglang-router"  # the router's unit (router/facts.py UNIT)
STAGING_UNIT = "sglang-router-staging"  # the router's unit, staging
STAGING_UNIT_PATH = f"/etc/systemd/system/{STAGING_UNIT}.service"
STAGING_LAUNCHER_PATH = f"{CONF_DIR}/launch-staging.py"
#: The staging router listens this far above the public port, and exports its metrics this far above the
#: router's metrics port (30000 → 30010, 29000 → 29010).
STAGING_OFFSET = 10
NFT_TABLE = "deploy_mig"
#: The module a rendered launcher imports (`from sglang_router.launch_router import …`): the running package.
OLD_MODULE = "sglang_router"
#: graceful_stop_script marks a unit it sent SIGTERM to here (tmpfs: a reboot ends the unit and the mark): a router
#: finishing its requests after SIGTERM still reads `active` to `systemctl is-active`, and only this mark tells a
#: resumed migration that it drains (it must not be stopped harder, nor be sent new connections again).
DRAIN_MARK_DIR = "/run/deploy-router-drain"


def drain_mark(unit: str) -> str:
    return f"{DRAIN_MARK_DIR}/{unit}"


def staging_port(spec: RouterSpec) -> int:
    return spec.port + STAGING_OFFSET


def staging_metrics_port(spec: RouterSpec) -> int:
    return exported_metrics_port(spec.flags) + STAGING_OFFSET


def render_staging(spec: RouterSpec, schema: FlagSchema, urls: list[str], api_key: str | None) -> RouterBundle:
    """The staging smg: the inventory's router on the staging port and metrics port, its own unit and launcher
    (the key file is the router's own: the same key)."""
    staged = spec.model_copy(update={"port": staging_port(spec),
                                     "flags": {**spec.flags, "prometheus-port": staging_metrics_port(spec)}})
    return render_router(staged, schema, urls, api_key, unit_path=STAGING_UNIT_PATH,
                         launcher_path=STAGING_LAUNCHER_PATH)


def free_port_check(*ports: int) -> str:
    """Shell: exit 3 naming the listener when a port is taken in the container (before the staging unit starts:
    smg would fail to bind and restart in a loop)."""
    lines = []
    for port in ports:
        filt = shlex.quote(f"sport = :{port}")
        lines.append(f"if ss -Hltn {filt} | grep -q .; then echo \"port {port} is taken in the router's container: "
                     f"$(ss -Hltnp {filt} | head -1)\"; exit 3; fi")
    return "\n".join(lines)


def redirect_script(public: int, staging: int) -> str:
    """Shell: install nftables when `nft` is missing (the site's apt sources), then, in one nft transaction,
    (re)make the table that sends new connections for `public` to `staging`. The port is matched through a set
    (`ports`): stop_redirecting_script takes it out of the set, the rules stay."""
    rule = f"tcp dport @ports tcp flags & (syn | ack) == syn redirect to :{staging}"
    return "\n".join([
        "set -e",
        "if ! command -v nft >/dev/null 2>&1; then",
        "  export DEBIAN_FRONTEND=noninteractive",
        "  apt-get install -y -q nftables >/dev/null 2>&1 || { apt-get update -q >/dev/null && "
        "apt-get install -y -q nftables >/dev/null; }",
        "fi",
        "nft -f - <<'DEPLOY_NFT_EOF'",
        f"add table ip {NFT_TABLE}",
        f"delete table ip {NFT_TABLE}",
        f"table ip {NFT_TABLE} {{",
        f"  set ports {{ type inet_service; elements = {{ {public} }}; }}",
        f"  chain prerouting {{ type nat hook prerouting priority -100; {rule}; }}",
        f"  chain output {{ type nat hook output priority -100; ip daddr 127.0.0.1 {rule}; }}",
        "}",
        "DEPLOY_NFT_EOF",
    ])


def unredirect_script() -> str:
    """Shell: delete the redirect table. Only once nothing serves a redirected connection: on this kernel (6.x,
    checked in a network namespace) deleting the table, or flushing its rules, breaks every redirected connection
    still open (reset, or its replies lost); taking the port out of the rule's set does not."""
    return f"if command -v nft >/dev/null 2>&1; then nft delete table ip {NFT_TABLE} 2>/dev/null || true; fi"


def stop_redirecting_script(public: int) -> str:
    """Shell: the public port out of the redirect's set: new connections reach the public port's own listener,
    the connections already redirected keep going to the staging router (the table and its rules stay)."""
    return (f"if command -v nft >/dev/null 2>&1; then nft delete element ip {NFT_TABLE} ports '{{ {public} }}' "
            "2>/dev/null || true; fi")


def graceful_stop_script(unit: str, port: int, timeout_s: float) -> str:
    """Shell: SIGTERM starts the router's own graceful shutdown (both packages: stop accepting, finish every
    request in flight, streams included, close idle keep-alive connections, up to --shutdown-grace-period-secs);
    wait until it exited, at most `timeout_s`, then SIGKILL and `systemctl stop` (the unit's TimeoutStopSec, the
    router's grace period and more, would let a second SIGTERM wait past this bound).
    The unit is marked draining (drain_mark) before the SIGTERM and the mark goes once it stopped; a unit already
    marked (a run killed while it drained) is not sent SIGTERM again, only waited for. Prints the established
    client connections on `port` at the SIGTERM, whether the unit ran, and the seconds waited."""
    q, mark = shlex.quote(unit), shlex.quote(drain_mark(unit))
    ticks = max(1, int(timeout_s * 2))
    return "\n".join([
        f"printf 'connections=%s\\n' \"$(ss -Htn state established {shlex.quote(f'( sport = :{port} )')} | wc -l)\"",
        "t=0",
        f"if systemctl is-active --quiet {q}; then",
        "  echo was_active=yes",
        f"  if [ ! -e {mark} ]; then mkdir -p {shlex.quote(DRAIN_MARK_DIR)} && date +%s > {mark}; "
        f"systemctl kill -s TERM {q}; fi",
        f"  while systemctl is-active --quiet {q} && [ $t -lt {ticks} ]; do sleep 0.5; t=$((t+1)); done",
        "fi",
        f"systemctl is-active --quiet {q} && systemctl kill -s KILL {q}",
        f"systemctl stop {q} 2>/dev/null || true",
        f"rm -f {mark}",
        "printf 'waited=%s\\n' \"$((t / 2))\"",
    ])


def clear_drain_mark_script(unit: str) -> str:
    """Shell: a unit about to be (re)started is not draining."""
    return f"rm -f {shlex.quote(drain_mark(unit))}"


def remove_staging_script() -> str:
    """Shell: stop the staging router (SIGTERM: smg finishes what it serves) and remove its files."""
    unit = shlex.quote(STAGING_UNIT)
    return "\n".join([
        f"systemctl stop {unit} 2>/dev/null || true",
        f"systemctl disable {unit} >/dev/null 2>&1 || true",
        f"rm -f {shlex.quote(STAGING_UNIT_PATH)} {shlex.quote(STAGING_LAUNCHER_PATH)} "
        f"{shlex.quote(drain_mark(STAGING_UNIT))}",
        "systemctl daemon-reload",
        f"systemctl reset-failed {unit} 2>/dev/null || true",
    ])


def state_command() -> str:
    """Shell, one line per fact: the module the router's launcher imports, the staging unit's state and file,
    whether the redirect table exists and whether it still sends new connections (its port set is not empty: the
    finish phase empties it first), and which of the two units was sent SIGTERM and drains (drain_mark)."""
    return "\n".join([
        "printf 'module=%s\\n' \"$(sed -n 's/^from \\([A-Za-z_]*\\)\\.launch_router import.*/\\1/p' "
        f"{shlex.quote(LAUNCHER_PATH)} 2>/dev/null)\"",
        f"printf 'staging=%s\\n' \"$(systemctl is-active {shlex.quote(STAGING_UNIT)} 2>/dev/null)\"",
        f"[ -f {shlex.quote(STAGING_UNIT_PATH)} ] && echo staging_unit=yes",
        f"command -v nft >/dev/null 2>&1 && nft list table ip {NFT_TABLE} >/dev/null 2>&1 && echo redirect=yes",
        f"command -v nft >/dev/null 2>&1 && nft list set ip {NFT_TABLE} ports 2>/dev/null | grep -q 'elements' "
        "&& echo redirecting=yes",
        f"[ -e {shlex.quote(drain_mark(UNIT))} ] && echo router_draining=yes",
        f"[ -e {shlex.quote(drain_mark(STAGING_UNIT))} ] && echo staging_draining=yes",
        "true",
    ])


def key_values(output: str) -> dict[str, str]:
    """Pure: the `key=value` lines these scripts print (state_command, graceful_stop_script), values stripped."""
    return {k: v.strip() for k, v in (line.split("=", 1) for line in output.splitlines() if "=" in line)}


@dataclass(frozen=True)
class MigrationState:
    """The router container's migration facts (MigrationState.parse of state_command's output)."""

    module: str = ""  # what the installed launcher imports: sglang_router (0.3.2), smg, "" (none)
    staging: str = "inactive"  # `systemctl is-active` of the staging unit
    staging_unit: bool = False
    redirect: bool = False
    #: The redirect still sends new connections for the public port (its set holds the port): not yet finishing.
    redirecting: bool = False
    #: Sent SIGTERM by a graceful stop that did not see it exit (drain_mark): the router's unit, the staging unit.
    router_draining: bool = False
    staging_draining: bool = False

    @classmethod
    def parse(cls, output: str) -> MigrationState:
        kv = key_values(output)
        return cls(module=kv.get("module", ""), staging=kv.get("staging", "") or "inactive",
                   staging_unit=kv.get("staging_unit") == "yes", redirect=kv.get("redirect") == "yes",
                   redirecting=kv.get("redirecting") == "yes", router_draining=kv.get("router_draining") == "yes",
                   staging_draining=kv.get("staging_draining") == "yes")

    @property
    def leftover(self) -> bool:
        """An interrupted migration left a staging unit or the redirect behind."""
        return self.staging_unit or self.redirect or self.staging == "active"

    def text(self) -> str:
        parts = []
        if self.staging_unit or self.staging == "active":
            draining = ", draining" if self.staging_draining and self.staging == "active" else ""
            parts.append(f"staging unit {STAGING_UNIT} ({self.staging}{draining})")
        if self.redirect:
            parts.append(f"nft table ip {NFT_TABLE}" + ("" if self.redirecting else " (no longer redirecting)"))
        return " and ".join(parts) or "nothing"


@dataclass(frozen=True)
class UnitState:
    """`systemctl is-active` of the router's unit ("unknown" when it printed none) and the migration's facts, read
    together (`systemctl is-active UNIT || true` then state_command)."""

    unit: str
    migration: MigrationState

    @classmethod
    def parse(cls, output: str) -> UnitState:
        lines = output.strip().splitlines()
        unit = (lines[0].strip() if lines and "=" not in lines[0] else "") or "unknown"
        return cls(unit, MigrationState.parse(output))


@dataclass(frozen=True)
class StopReport:
    """What graceful_stop_script printed: the connections open when it sent SIGTERM (-1: not known) and whether
    the unit was active."""

    connections: int
    was_active: bool

    @classmethod
    def parse(cls, output: str) -> StopReport:
        kv = key_values(output)
        conns = kv.get("connections", "")
        return cls(int(conns) if conns.isdigit() else -1, kv.get("was_active") == "yes")
