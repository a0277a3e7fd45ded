"""Target words → hosts. Pure: reads the inventory, touches nothing remote.

Grammar (one place for every command):

    [host] NAME…            one or more hosts by inventory name or address (`host` may be repeated: host a host b)
    group G…                every host of inventory group G (nested groups expanded); several groups allowed
    --all                   every host in the inventory

Words may mix (`group prod host pve-gpu-9`). A host reached twice is run once, in order of first mention. A
command runs in single-host mode (exactly today's output and --json) when the words name one host with `host X`
or a bare `X`; any group, several hosts or --all make it a fleet run.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import ConfigError, UsageError
from orchestrator.inventory.models import TARGET_KEYWORDS, Host, Inventory


@dataclass(frozen=True)
class TargetSpec:
    """What the user typed, before looking at the inventory."""

    hosts: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    all_hosts: bool = False

    @property
    def empty(self) -> bool:
        return not (self.hosts or self.groups or self.all_hosts)

    @property
    def fleet(self) -> bool:
        """Fleet mode: any group, --all, or more than one host word."""
        return bool(self.groups) or self.all_hosts or len(self.hosts) > 1

    def describe(self) -> str:
        if self.all_hosts:
            return "--all"
        parts = [f"group {g}" for g in self.groups] + [f"host {h}" for h in self.hosts]
        return " ".join(parts)


def parse_targets(words: tuple[str, ...] | list[str], *, all_hosts: bool = False) -> TargetSpec:
    """Split `host a b group g` into host and group names; a keyword with nothing after it is an error."""
    hosts: list[str] = []
    groups: list[str] = []
    mode = "host"
    pending: str | None = None
    for word in words:
        if word in TARGET_KEYWORDS:
            if pending is not None:
                raise UsageError(f"'{pending}' must be followed by a name", fix=_EXAMPLE)
            mode = pending = word
            continue
        pending = None
        (groups if mode == "group" else hosts).append(word)
    if pending is not None:
        raise UsageError(f"'{pending}' must be followed by a name", fix=_EXAMPLE)
    if all_hosts and (hosts or groups):
        raise UsageError("--all cannot be combined with host or group names", fix="give either --all or the names")
    return TargetSpec(tuple(hosts), tuple(groups), all_hosts)


_EXAMPLE = "e.g. `deploy up host 10.1.230.174`, `deploy up host a b`, `deploy up group prod` or `deploy up --all`"


def resolve_targets(inventory: Inventory, spec: TargetSpec) -> list[Host]:
    """The hosts the words name, each once, in order of first mention; every unknown name is reported at once."""
    if spec.all_hosts:
        if not inventory.hosts:
            raise ConfigError("--all: the inventory has no hosts", fix="add hosts, or check --inventory")
        return list(inventory.hosts.values())
    found: list[Host] = []
    problems: list[str] = []
    for group in spec.groups:
        try:
            found.extend(inventory.group_hosts(group))
        except ConfigError as err:
            problems.append(err.what)
    for name in spec.hosts:
        try:
            found.append(inventory.find_host(name))
        except ConfigError as err:
            problems.append(err.what)
    if problems:
        raise ConfigError("; ".join(problems), fix="check the names against the inventory (hosts:, groups:)")
    unique: dict[str, Host] = {}
    for host in found:
        unique.setdefault(host.name, host)
    return list(unique.values())
