"""What differs between the router packages deploy drives, in one place. Pure.

Both are the same Rust gateway behind a Python launcher (`<module>.launch_router.parse_router_args` and
`launch_router`, `<module>.router_args.RouterArgs.add_cli_args`), and both speak the `/workers` API the adapter
(client.py) uses. What differs, read from the real wheels (docs/fleet.md "The router"):
- sglang-router 0.3.2: `DELETE /workers/{id}` drops the worker at once; `GET /workers` has no `status`;
- smg 1.13.0: `DELETE` is queued (202) and the worker stays listed as `draining`, sent no new request, until its
  fixed drain settle of 5 s passed (the Rust core's `drain_settle_secs`, which the 1.13.0 Python launcher leaves at
  its default: no flag changes it); then it leaves the list, and requests still running complete.
  `PATCH {"priority": 0}` is accepted (202) but the worker keeps its share of requests, so it does not take it
  out of selection. Health checks default to every 60 s with 2 successes to come back, and a worker added while
  its server is down stays a `pending` job retried every 30 s: the unit sets these (SMG_HEALTH_FLAGS) unless
  router.flags does.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.flags.limits import FlagValue
from orchestrator.inventory.models import RouterSpec

#: smg's health settings deploy sets (flag → value) unless router.flags names the flag. Interval 5 s: a server
#: that stopped is out within threshold × interval (15 s), one that serves again is back after one check (5 s),
#: not a minute later. Timeout 25 s: above sglang's own SGLANG_HEALTH_CHECK_TIMEOUT (20 s), so a /health that is
#: slow under load (it runs a one-token generation) is not read as down. A pending add is retried every 5 s.
SMG_HEALTH_FLAGS: dict[str, FlagValue] = {"health-check-interval-secs": 5, "health-check-timeout-secs": 25,
                                          "health-success-threshold": 1, "worker-startup-check-interval": 5}
#: Where the router exports its metrics unless router.flags says (`--prometheus-port`: smg's documented default,
#: and sglang-router 0.3.2's, which is smg inside).
SMG_METRICS_PORT = 29000


def exported_metrics_port(flags: dict[str, FlagValue]) -> int:
    """The port the router serves its Prometheus metrics on (both packages export them there)."""
    port = flags.get("prometheus-port", SMG_METRICS_PORT)
    return int(port) if isinstance(port, int | str) else SMG_METRICS_PORT


@dataclass(frozen=True)
class RouterRelease:
    """One router package at one version: what to install, import and validate against."""

    package: str
    version: str

    @property
    def module(self) -> str:
        """The Python package the launcher and the flag probe import."""
        return "smg" if self.package == "smg" else "sglang_router"

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def name(self) -> str:
        """`smg 1.13.0`: how messages name it."""
        return f"{self.package} {self.version}"

    @property
    def schema_file(self) -> str:
        """The packaged parser dump's file name under orchestrator/router/schemas/."""
        return f"{self.package}-{self.version}.json"

    @property
    def drains_itself(self) -> bool:
        """Whether `DELETE /workers/{id}` keeps the worker listed (draining) until its requests finished."""
        return self.package == "smg"

    def default_flags(self) -> dict[str, FlagValue]:
        """Flags deploy adds to the unit unless router.flags sets them (smg's health settings)."""
        return dict(SMG_HEALTH_FLAGS) if self.package == "smg" else {}

    def metrics_port(self, flags: dict[str, FlagValue]) -> int | None:
        """The port of the router's own Prometheus endpoint; None for sglang-router (deploy reads none there)."""
        return exported_metrics_port(flags) if self.package == "smg" else None


def release_of(spec: RouterSpec) -> RouterRelease:
    return RouterRelease(spec.package, spec.version)
