"""Whether a server is open to the site's LAN without a key (pure): `deploy plan` says so."""

from __future__ import annotations

import ipaddress

from orchestrator.inventory.models import ServerProfile


def on_lan(host: str) -> bool:
    """A bind address other than loopback: reachable at the container's address on the site network."""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return True  # a name: it resolves to some address of the container


def keyless_on_lan(profile_name: str, profile: ServerProfile) -> str | None:
    """The note for a profile served on the LAN with no api_key; None when it has a key or binds loopback."""
    if profile.api_key is not None or not on_lan(profile.host):
        return None
    return (f"profile {profile_name} serves on {profile.host}:{profile.port}, reachable from the site's LAN, and has "
            f"no api_key: anyone on the LAN can use the server; set profiles.{profile_name}.api_key "
            "(a file or env var, docs/inventory.md)")
