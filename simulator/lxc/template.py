"""The Debian container templates (12 bookworm, 13 trixie), built once per machine with debootstrap and cached like
PVE's `vztmpl`.

PVE's `debian-12-standard` appliance (and PVE 9's `debian-13-standard`, the same recipe on trixie) is built by
Proxmox's DAB: the `required` priority set plus `systemd-sysv`, DAB's own includes (less, ssh/openssh-server,
logrotate) and postfix, plus the `important`/`standard` priority sets. We keep what shapes how the tool meets a
fresh container (systemd as PID 1, dbus, iproute2/ifupdown with isc-dhcp-client, so `net0: ip=dhcp` really asks
DHCP as in the real template, openssh-server, less, logrotate) and leave out the large optional rest (postfix, man
pages, ...): what matters is what a standard container lacks (python3-venv, curl, NVIDIA userspace), and it lacks
them here too.

Bookworm is what every simulated host has in `local:vztmpl`; trixie is built only when something asks for it (an
appliance download of `debian-13-standard`), from the same Debian archive this machine's apt uses: its sources
may name bookworm only, and one archive serves every release.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("DEPLOY_SIM_TEMPLATE_CACHE", "/var/cache/deploy-sim/templates"))


@dataclass(frozen=True)
class Release:
    """One Debian release a template is built from: its suite, the name PVE's appliance index gives the template
    (the cached file carries it, so `local:vztmpl/<name>` works unchanged) and the python3 it ships."""

    suite: str
    template_name: str
    python: str  # "3.11": what the container's `python3` is, so the wheelhouse serves wheels for it

    @property
    def family(self) -> str:
        """`debian-12-standard`: the appliance package name, without version and arch."""
        return self.template_name.split("_", 1)[0]


BOOKWORM = Release("bookworm", "debian-12-standard_12.7-1_amd64.tar.zst", "3.11")
TRIXIE = Release("trixie", "debian-13-standard_13.1-2_amd64.tar.zst", "3.13")
RELEASES = (BOOKWORM, TRIXIE)
#: The default release: every simulated host's `local:vztmpl` holds it.
TEMPLATE_NAME = BOOKWORM.template_name
SUITE = BOOKWORM.suite
PACKAGES = ("systemd", "systemd-sysv", "dbus", "iproute2", "ifupdown", "isc-dhcp-client", "less", "openssh-server",
            "logrotate")
#: Never in the template (checked after the build): the tool must install these itself.
FORBIDDEN = ("usr/bin/nvidia-smi", "root/ml-env", "models", "usr/lib/python3/dist-packages/venv")


class TemplateError(RuntimeError):
    """The template cannot be built; the message says what to install or fix."""


@dataclass(frozen=True)
class BuildResult:
    path: Path
    seconds: float
    size_bytes: int
    built: bool  # False when the cached tarball was reused


def release_for(template: str) -> Release | None:
    """The release whose template a name (`debian-13-standard_13.1-2_amd64.tar.zst`, any version) belongs to."""
    family = template.split("_", 1)[0]
    return next((r for r in RELEASES if r.family == family), None)


def _apt_sources(sources_dir: Path) -> list[tuple[str, list[str]]]:
    """(URI, suites) of each `deb` source: deb822 .sources first, then sources.list, in apt's order."""
    found: list[tuple[str, list[str]]] = []
    for path in sorted((sources_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites:
                found.append((uris.group(1), suites.group(1).split()))
    legacy = sources_dir / "sources.list"
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m:
                found.append((m.group(1), [m.group(2)]))
    return found


def apt_mirror(sources_dir: Path = Path("/etc/apt"), suite: str = SUITE) -> str:
    """The Debian mirror this machine's apt uses for `suite`; when no source names it (a bookworm machine
    building the trixie template), the mirror of another release's main suite: one Debian archive serves all."""
    sources = _apt_sources(sources_dir)
    for want in (suite, *(r.suite for r in RELEASES if r.suite != suite)):
        uri = next((u for u, suites in sources if want in suites), None)
        if uri:
            return uri
    raise TemplateError(f"no apt source for Debian {suite} in {sources_dir}: cannot pick a mirror for debootstrap")


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], what: str) -> None:
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-8:])
        raise TemplateError(f"{what} failed (exit {res.returncode}): {tail}")


def cached_path(cache_dir: Path | None = None, release: Release = BOOKWORM) -> Path:
    """Where the template built from PACKAGES is cached: a folder per package set, so a template built with
    another set (an older checkout's) is never taken for this one, and both can live side by side; each
    release's file carries its own name in it."""
    digest = hashlib.sha256(" ".join(PACKAGES).encode()).hexdigest()[:10]
    return (cache_dir or CACHE_DIR) / f"stock-{digest}" / release.template_name


def lock_path(cache: Path, release: Release) -> Path:
    """One build lock per release: a trixie build (minutes) must not hold up hosts waiting for bookworm's."""
    return cache / (".build.lock" if release == BOOKWORM else f".build-{release.suite}.lock")


def ensure(cache_dir: Path | None = None, release: Release = BOOKWORM) -> BuildResult:
    """The cached template, built first if missing. Parallel callers wait on one lock and build it once."""
    cache = cache_dir or CACHE_DIR
    target = cached_path(cache, release)
    t0 = time.monotonic()
    if target.is_file():
        return BuildResult(target, 0.0, target.stat().st_size, False)
    with _lock(lock_path(cache, release)):
        if target.is_file():
            return BuildResult(target, time.monotonic() - t0, target.stat().st_size, False)
        for tool in ("debootstrap", "zstd"):
            if shutil.which(tool) is None:
                raise TemplateError(f"{tool} not installed: run scripts/install.sh")
        mirror = apt_mirror(suite=release.suite)
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=cache) as tmp:
            rootfs = Path(tmp) / "rootfs"
            _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", release.suite, str(rootfs),
                  mirror], f"debootstrap of Debian {release.suite} from {mirror}")
            _clean(rootfs)
            part = Path(tmp) / release.template_name
            _run(["tar", "--numeric-owner", "--zstd", "-cpf", str(part), "-C", str(rootfs), "."], "tar")
            os.replace(part, target)
    return BuildResult(target, time.monotonic() - t0, target.stat().st_size, True)


def _clean(rootfs: Path) -> None:
    """What PVE's appliance builder strips too: package lists, downloaded .debs, the build host's identity."""
    for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
        d = rootfs / sub
        for p in d.iterdir() if d.is_dir() else []:
            if p.is_file() and p.name != "lock":
                p.unlink()
    for p in (rootfs / "var/cache/apt").glob("*.bin"):
        p.unlink()
    (rootfs / "etc/hostname").write_text("localhost\n")
    mid = rootfs / "etc/machine-id"
    mid.write_text("")  # empty: systemd generates one at first boot, as in PVE's templates
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # pct create generates host keys per container
    leftovers = [f for f in FORBIDDEN if (rootfs / f).exists()]
    if leftovers:
        raise TemplateError(f"template would contain {', '.join(leftovers)}")


def install_into(cache_file: Path, template_cache: Path) -> Path:
    """Make the cached template appear in a host's `local:vztmpl` storage (hard link, else copy)."""
    template_cache.mkdir(parents=True, exist_ok=True)
    dest = template_cache / cache_file.name
    if dest.is_file() and dest.stat().st_size == cache_file.stat().st_size:
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(cache_file, tmp)
    except OSError:
        shutil.copyfile(cache_file, tmp)
    os.replace(tmp, dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    """`python -m simulator.lxc.template [SUITE]`: build (or find) one release's template, with size and time."""
    args = sys.argv[1:] if argv is None else argv
    release = next((r for r in RELEASES if r.suite == (args[0] if args else SUITE)), None)
    if release is None:
        print(f"unknown suite {args[0]!r}; one of {', '.join(r.suite for r in RELEASES)}", file=sys.stderr)
        return 2
    res = ensure(release=release)
    print(f"{res.path}: {res.size_bytes / 1e6:.1f} MB, {'built' if res.built else 'cached'} in {res.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
