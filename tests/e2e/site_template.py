"""A site template for the end-to-end tests: a container provisioned by the tool itself, dumped with `vzdump`.

Most end-to-end tests are about what happens after provisioning (units, releases, rolls, gates, faults), and a
bare Debian container costs 20-40 s of apt, pip and downloads per test. Operators solve the same problem the
same way: provision one container (`deploy up --playbook provision`), clean it, `vzdump` it, and create the
others from that archive (docs/playbooks.md). So the archive is built here once per machine and code version:
on a throwaway simulated host, by the real CLI, against the real template, real apt, pip and `hf download`.
Tests that are about provisioning (tests/e2e/test_up_real_container.py) still start from the stock template.

The cache key covers everything that decides the archive's content (the tool, the playbooks, the inventory
profiles, the simulated software and the stock template), so a change to any of them builds it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from simulator.lxc import template as lxc_template
from tests import sim_hosts

REPO = Path(__file__).resolve().parents[2]
CACHE = lxc_template.CACHE_DIR / "site"
KEEP = 3  # archives of other code versions kept (other worktrees, a switch back)
#: What an operator removes before dumping a template: apt caches, logs, the machine's identity; and, as slim images
#: do, documentation (copyright files kept), man pages and translations: a quarter of the rootfs's 15k files, which
#: every create from the archive would unpack again (tar's time goes by file: ~0.2 s of CPU per create here).
CLEAN = ("apt-get clean && rm -rf /var/lib/apt/lists/* /var/log/journal/* && : > /etc/machine-id && "
         "find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete && "
         "find /usr/share/doc -mindepth 1 -type d -empty -delete && rm -rf /usr/share/man/* /usr/share/locale/*")
#: docs/playbooks.md: the archive holds at most the rootfs (`du -x`; zstd only shrinks it); refuse to dump when the
#: dump directory's filesystem (the host's root on a default install) cannot take it. The tests' 4 MB model stays
#: in the archive (the recipe's `--exclude-path MODEL_PATH` would make every test's container download it again).
#: Allocated bytes (`du -sx -B1`), where the recipe counts apparent ones (`du -sxb`): on a real host the two agree; the
#: simulator's stand-in venvs hold their real sizes as holes (docs/simulator.md, Real sizes), which vzdump's
#: `tar --sparse` does not write, so apparent bytes (~10 GB a venv) would ask the dump directory for room no archive
#: takes.
SPACE_CHECK = ("need=$(pct exec 120 -- du -sx -B1 / | cut -f1); free=$(df -B1 --output=avail /var/lib/vz/dump | "
               "tail -n 1); echo \"archive at most $need bytes, $free free\"; [ \"$need\" -lt \"$free\" ]")
INPUTS = ("orchestrator", "simulator/software", "simulator/sglang_standin",
          "simulator/gpu")


def cache_dir(release: lxc_template.Release = lxc_template.BOOKWORM) -> Path:
    """`site/` for bookworm (as before, so its cached archives stay valid), `site-trixie/` for trixie: each
    release's archives are kept and pruned in a folder of their own, which an older checkout's prune
    (every `deploy-site-*` in `site/`) never reaches."""
    return CACHE if release == lxc_template.BOOKWORM else CACHE.with_name(f"site-{release.suite}")


def cache_key(release: lxc_template.Release = lxc_template.BOOKWORM) -> str:
    h = hashlib.sha256()
    stock = lxc_template.ensure(release=release).path
    h.update(f"{stock.name}:{stock.stat().st_size}".encode())
    h.update(Path(__file__).read_bytes())  # the recipe itself (CLEAN, the dump's options)
    for top in INPUTS:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def site_template(release: lxc_template.Release = lxc_template.BOOKWORM) -> Path:
    """The cached archive for this code version, provisioned from the release's stock template, built first if
    missing; xdist workers and parallel runs wait for one build."""
    target = cache_dir(release) / f"deploy-site-{cache_key(release)}.tar.zst"
    if target.is_file():
        return target
    with _locked(CACHE / ".build.lock"):  # one for both releases: each build runs its sim host on the same number
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="deploy-site-template-") as workdir:
                _build(Path(workdir), target, release)
            _prune(target)
    return target


def _build(workdir: Path, target: Path, release: lxc_template.Release) -> None:
    from simulator.manager.lifecycle import sim_down, sim_up
    from tests.e2e.conftest import make_env

    root = workdir / "site-template-sim"
    try:
        (info,) = sim_up(root, first=sim_hosts.sim_number(sim_hosts.OFFSET_SITE_TEMPLATE), time_scale=5.0,
                         ct_storage="tmpfs")
        (workdir / "env").mkdir(exist_ok=True)
        # the release's family: bookworm's is in `local:vztmpl` already, another is downloaded (aplinfo) as on PVE 9
        env = make_env(info, workdir / "env", f"local:vztmpl/{release.family}")
        res = env.run("--json", "up", "host", info.name, "--playbook", "provision", timeout=1500)
        if res.rc != 0:
            raise RuntimeError(f"building the site template: `deploy up --playbook provision` failed:\n"
                               f"{res.text[-3000:]}")
        cleaned = env.ct(CLEAN)
        if cleaned.rc != 0:
            raise RuntimeError(f"cleaning the site template's container failed: {cleaned.text}")
        space = env.ssh(SPACE_CHECK)
        if space.rc != 0:
            raise RuntimeError(f"the dump directory cannot take the site template: {space.text}")
        dumped = env.ssh("vzdump 120 --mode stop --compress zstd --dumpdir /var/lib/vz/dump", timeout=600)
        if dumped.rc != 0:
            raise RuntimeError(f"vzdump of the site template's container failed: {dumped.text}")
        archive = next((info.host_dir / "fs" / "var/lib/vz/dump").glob("vzdump-lxc-120-*.tar.zst"))
        part = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copyfile(archive, part)
        os.replace(part, target)
    finally:
        sim_down(root)


def _prune(keep: Path) -> None:
    others = sorted((p for p in keep.parent.glob("deploy-site-*.tar.zst") if p != keep),
                    key=lambda p: p.stat().st_mtime)
    for old in others[:-KEEP] if len(others) > KEEP else []:
        old.unlink(missing_ok=True)


def install(host_dir: Path, release: lxc_template.Release = lxc_template.BOOKWORM) -> str:
    """Put the site template into a simulated host's `local:vztmpl` storage; its volume ID."""
    archive = site_template(release)
    lxc_template.install_into(archive, host_dir / "fs" / "var/lib/vz/template/cache")
    return f"local:vztmpl/{archive.name}"


def main() -> int:
    """scripts/test.sh builds the stock templates (Debian 12 and 13) and the Debian 12 site template before pytest,
    so no test's timeout has to cover a cold build. The Debian 13 site template is built by the one module that
    uses it (tests/e2e/test_debian13.py), in parallel with the other modules, not before all of them."""
    from tests.conftest import sim_skip_reason
    from tests.sim.lxc_support import lxc_skip_reason

    reason = sim_skip_reason() or lxc_skip_reason()
    if reason:
        print(f"site template: not built ({reason})")
        return 0
    for release in lxc_template.RELEASES:  # PVE 9's debian-13-standard too: tests/e2e/test_debian13.py
        stock = lxc_template.ensure(release=release)
        print(f"stock template ({release.suite}): {stock.path} ({stock.size_bytes / 1e6:.0f} MB, "
              f"{'built' if stock.built else 'cached'} in {stock.seconds:.1f} s)")
    t0 = time.monotonic()
    path = site_template()
    print(f"site template: {path} ({path.stat().st_size / 1e6:.0f} MB, {time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
