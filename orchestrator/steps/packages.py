"""Inside the container: the Debian packages the pipeline needs (a stock template may lack python3-venv, curl).

What is missing is read in the facts round trip (`missing_pkgs`, one dpkg-query), so a converged run spends no
round trip here. Missing packages are installed with one `apt-get update` and one non-interactive
`apt-get install`, through the inventory's apt proxy when it names one.
"""

from __future__ import annotations

import shlex

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.facts import CT, CT_PACKAGES
from orchestrator.inventory.models import ContainerSpec
from orchestrator.parsers import ParseError
from orchestrator.runlog import StepRecord
from orchestrator.steps.session import ensure_facts, refresh_ct_facts, unknown_until_started

APT_TIMEOUT_S = 1800


def apt_install_command(spec: ContainerSpec, packages: list[str]) -> str:
    """One shell line: `apt-get update` once, then install without recommends, never prompting.

    The proxy goes in as an `-o` option on both calls (nothing is written to the container's apt config).
    """
    opts = f" -o {shlex.quote('Acquire::http::Proxy=' + spec.apt_proxy)}" if spec.apt_proxy else ""
    env = "DEBIAN_FRONTEND=noninteractive"
    return (f"export {env}; apt-get{opts} -q update && "
            f"apt-get{opts} -q -y --no-install-recommends -o Dpkg::Options::=--force-confdef "
            f"-o Dpkg::Options::=--force-confold install {' '.join(map(shlex.quote, packages))}")


def container_missing(ctx: StepContext) -> list[str] | None:
    """The required packages the container lacks; None when it is not running (unknown)."""
    try:
        return ctx.facts.get(CT.missing_pkgs)
    except ParseError as exc:
        raise CheckFailed(f"cannot tell which packages CT {ctx.vmid} has: {exc}",
                          fix=("the container must be Debian-based (dpkg); use a debian-12-standard or (PVE 9) "
                               "debian-13-standard template"),
                          host=ctx.host.name) from exc


@step("ct_packages", ct_facts=(CT.missing_pkgs,))
def ct_packages(ctx: StepContext, record: StepRecord) -> None:
    """Debian packages the pipeline needs in the container (python3-venv, curl, …), installed when missing."""
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "which packages the container lacks"):
        return
    missing = container_missing(ctx)
    record.details.update({"required": list(CT_PACKAGES), "missing": missing})
    if missing == []:
        record.summary = f"{', '.join(CT_PACKAGES)} installed"
        return
    proxy = f" through {ctx.host.container.apt_proxy}" if ctx.host.container.apt_proxy else ""
    what = (f"apt-get install {', '.join(missing)} in CT {ctx.vmid}{proxy}" if missing is not None else
            f"apt-get install in CT {ctx.vmid} whichever of {', '.join(CT_PACKAGES)} it lacks{proxy}")
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    if missing is None:  # not a plan, and still no facts: the container step should have started it
        raise CheckFailed(f"CT {ctx.vmid} is not running", fix="re-run deploy up", host=ctx.host.name)
    ctx.say(what)
    res = ctx.ct.run(apt_install_command(ctx.host.container, missing), check=False, timeout=APT_TIMEOUT_S,
                     what="apt-get install", progress=lambda line: ctx.say(f"  apt: {line}"))
    if res.rc != 0:
        raise RemoteError(f"apt-get in CT {ctx.vmid} failed (exit {res.rc}): "
                          f"{res.said(500)}",
                          fix=("check the container's network and its apt sources; an air-gapped site sets "
                               "container.apt_proxy (or a local mirror in the container's sources.list)"),
                          host=ctx.host.name)
    refresh_ct_facts(ctx, CT.missing_pkgs)
    still = container_missing(ctx)
    if still:
        raise CheckFailed(f"after apt-get install, CT {ctx.vmid} still lacks {', '.join(still)}",
                          fix="read the apt output above; the packages may be missing from the configured mirror",
                          host=ctx.host.name)
    record.summary = f"installed {', '.join(missing)}"
