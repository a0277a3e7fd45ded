"""Issue 48's real-stack roll: a simulated host rolled from its stand-in release onto the REAL sglang stack, through
the real CLI, and back.

    python tests/perf/real_stack_roll.py [--release 0.5.12.post1|0.5.23] [--python 3.11|3.13] [--time-scale 5]

Not a test: the real stack is GBs (torch, flashinfer, sglang-kernel) and its build takes minutes on this machine,
beyond CI's time; README.md and docs/stacks.md#the-real-stack-on-a-simulated-host name it. What it does:

1. fills the real wheelhouse (simulator/software/realhouse.py: $DEPLOY_SIM_REAL_WHEELHOUSE, default
   /var/cache/deploy-sim/real-wheelhouse; on disk, never committed) from this machine's pip configuration: the first
   run downloads the closure (cold), later runs check the files' sha256 and download nothing (warm);
2. starts sim-N (N from DEPLOY_SIM_FIRST) with its container on disk (`ct_storage="disk"`, its root under
   /var/tmp: a real venv is ~10 GB, too big for a tmpfs), whose index serves that wheelhouse at /real/simple;
   `--python 3.13` makes the container PVE 9's Debian 13 (trixie: the trixie site template), 3.11 Debian 12's;
3. `deploy up` on the site template: release R1 on the stand-in sglang, verified;
4. points the host's `container.pip_index_url` at /real/simple, sets the profile to the release (RELEASE_PATCHES,
   RELEASE_FLAGS: 0.5.12.post1 with the shipped autotune patch, which targets its model_runner.py; 0.5.23 without
   it, as the example says: 0.5.13 and later autotune flashinfer_cutlass upstream, and with `--dsa-*` for
   `--nsa-*`), and runs `deploy lock` (pip's real resolution in the container) and `deploy roll host H --profile
   glm5-nvfp4`: the stack is built side by side with `--require-hashes` from the lock, patched (hashes recorded),
   the flags are validated by the real installed parser, the real server starts and dies (no GPU here), the tool
   names the death, and R1 is put back, serving; `deploy doctor` then names the nvcc the stack carries;
5. prints the figures: wall times, bytes downloaded, venv and pip-cache bytes, server start → verdict, start →
   R1 serving again. Nothing is asserted beyond the run's own outcome (exit 1 when the roll did not end as above).

Run as root, on a machine whose pip configuration reaches a package index. The sim root is removed at the end.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from simulator.lxc import template as lxc_template  # noqa: E402
from simulator.manager.lifecycle import SimHostInfo, sim_down, sim_up  # noqa: E402
from simulator.software import realhouse  # noqa: E402
from simulator.software.index import REAL_PREFIX  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import EXAMPLE_INVENTORY, DeployEnv, make_env  # noqa: E402
from tests.e2e.test_stacks import RENAMED  # noqa: E402

PROFILE = "glm5-nvfp4"
PATCH = "patches/sglang-autotune-flashinfer-cutlass.patch"
#: What the profile changes for each release: its sglang, its pins below sglang (realhouse.RELEASES, the same the
#: wheelhouse resolved with), its patches and its flags. The shipped patch is against 0.5.12.post1's model_runner.py;
#: 0.5.13 and later autotune flashinfer_cutlass upstream, and the patch applies to none of them (the example
#: profile's comment). 0.5.23 renamed `--nsa-*` to `--dsa-*` (docs/roll.md; the example's flags are 0.5.12.post1's).
RELEASE_PATCHES: dict[str, list[str]] = {"0.5.12.post1": [PATCH], "0.5.23": []}
RELEASE_FLAGS: dict[str, dict[str, str | None]] = {"0.5.12.post1": {}, "0.5.23": RENAMED}
#: Lines of the roll's output that mark the figures' events (the tool's own words, docs/roll.md).
SERVER_START = re.compile(r"journal: Started sglang\.service")
VERDICT = re.compile(r"rolling back to \S+: sglang logged a fatal line")
BACK = re.compile(r"healthy again after")


def current(env: DeployEnv) -> str:
    return env.ct("readlink /var/lib/deploy/current").stdout.strip().rsplit("/", 1)[-1]


def point_at_real_index(env: DeployEnv, url: str) -> None:
    """The host's container installs from the real wheelhouse: `container.pip_index_url` in its inventory."""
    path = env.inventory / "sim.yaml"
    hosts = yaml.safe_load(path.read_text())
    hosts["hosts"][env.host]["container"]["pip_index_url"] = url
    path.write_text(yaml.safe_dump(hosts, sort_keys=False))


def streamed(env: DeployEnv, args: list[str], log: list[tuple[float, str]], timeout_s: float) -> int:
    """`deploy ARGS` as a process, each output line printed as it comes and kept with its time (monotonic)."""
    proc = env.popen(*args)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        now = time.monotonic()
        log.append((now, line.rstrip("\n")))
        print(f"  {now - log[0][0]:7.1f}s | {line.rstrip()}", flush=True)
        if now > deadline:
            proc.kill()
            break
    return proc.wait()


def first_at(log: list[tuple[float, str]], pattern: re.Pattern[str], after: float = 0.0) -> tuple[float, str] | None:
    return next(((t, line) for t, line in log if t >= after and pattern.search(line)), None)


def du(env: DeployEnv, paths: str) -> dict[str, int]:
    out = env.ct(f"du -sb {paths} 2>/dev/null").stdout
    return {p: int(n) for n, p in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", default="0.5.12.post1", choices=sorted(realhouse.RELEASES))
    parser.add_argument("--python", default="3.11", choices=[r.python for r in lxc_template.RELEASES],
                        help="the container's Python: 3.11 a Debian 12 container (PVE 8), 3.13 a Debian 13 one (PVE 9)")
    parser.add_argument("--time-scale", type=float, default=5.0)
    parser.add_argument("--sim-dir", type=Path, default=Path("/var/tmp"),
                        help="where the sim root goes: on disk (a real venv is ~10 GB)")
    args = parser.parse_args()
    wall0 = time.monotonic()
    root = realhouse.real_wheelhouse_dir()
    fill = realhouse.fill(root, args.release, args.python)
    print(fill.describe(root), flush=True)
    os.environ["DEPLOY_SIM_REAL_WHEELHOUSE"] = str(root)  # hostsvc passes it to the host's index
    first = int(os.environ.get("DEPLOY_SIM_FIRST", "360"))
    with tempfile.TemporaryDirectory(prefix="deploy-real-stack-", dir=args.sim_dir) as tmp:
        sim_root = Path(tmp) / "sim"
        (info,) = sim_up(sim_root, hosts=1, first=first, time_scale=args.time_scale, ct_storage="disk")
        try:
            return run(info, Path(tmp), fill, wall0, args)
        finally:
            sim_down(sim_root)


def run(info: SimHostInfo, tmp: Path, fill: realhouse.Fill, wall0: float, args: argparse.Namespace) -> int:
    debian = next(r for r in lxc_template.RELEASES if r.python == args.python)
    env = make_env(info, tmp, site_template.install(Path(info.host_dir), debian))
    t = time.monotonic()
    up = env.run("up", "host", env.host, "--skip-bench", timeout=1800)
    up_s = time.monotonic() - t
    r1 = current(env)
    if up.rc != 0:
        print(f"up on the stand-in failed (exit {up.rc}):\n{up.text[-3000:]}")
        return 1
    print(f"R1 {r1}: stand-in sglang on {debian.family} (Python {debian.python}), up in {up_s:.1f} s", flush=True)
    standin_index = info.container_options["pip_index_url"]  # http://BRIDGE:3141/simple
    point_at_real_index(env, standin_index.removesuffix("/simple") + f"{REAL_PREFIX}/simple")
    shutil.copytree(EXAMPLE_INVENTORY / "patches", env.inventory / "patches")
    env.set_profile(sglang_version=args.release, constraints=list(realhouse.RELEASES[args.release]),
                    patches=RELEASE_PATCHES[args.release], flags=RELEASE_FLAGS[args.release], start_timeout_s=900)
    t = time.monotonic()
    lock = env.run("lock", PROFILE, "--host", env.host, timeout=3600)
    lock_s = time.monotonic() - t
    print(lock.text[-1500:], flush=True)
    if lock.rc != 0:
        print(f"deploy lock failed (exit {lock.rc}) in {lock_s:.1f} s; wall time, fill to end: "
              f"{time.monotonic() - wall0:.1f} s")
        return 1
    log: list[tuple[float, str]] = []
    t_roll = time.monotonic()
    rc = streamed(env, ["roll", "host", env.host, "--profile", PROFILE, "--skip-bench"], log, 3600)
    roll_s = time.monotonic() - t_roll
    after = current(env)
    health = env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout
    sizes = du(env, "/opt/deploy/stacks/*/ /root/ml-env /opt/deploy/stacks/.pip-cache /root/.cache/pip")
    # The toolchain the real first start would compile with: the nvcc a stack carries (0.5.23's nvidia-cuda-nvcc in
    # site-packages/nvidia/cu13/bin), which none of flashinfer's lookups finds, named by doctor's ct-toolchain.
    nvcc = env.ct("ls -l /opt/deploy/stacks/*/lib/python3*/site-packages/nvidia/cu*/bin/nvcc 2>&1").stdout.strip()
    doctor = env.run("--json", "doctor", "host", env.host, timeout=600)
    try:
        findings = doctor.json.get("findings", [])
    except ValueError:  # doctor printed no JSON: the figures go on without its line
        findings = []
    tool = next((f for f in findings if f.get("check") == "ct-toolchain"), None)
    start = first_at(log, SERVER_START, after=next((ts for ts, ln in log if "validat" in ln), t_roll))
    verdict = first_at(log, VERDICT, after=start[0] if start else t_roll)
    back = first_at(log, BACK, after=verdict[0] if verdict else t_roll)
    print("\n== figures ==")
    print(f"real wheelhouse {'cold' if fill.fetched else 'warm'}: {len(fill.files)} files, fetched {fill.fetched} "
          f"({fill.fetched_bytes:,} bytes downloaded) in {fill.seconds:.1f} s")
    print(f"deploy up (stand-in R1) {up_s:.1f} s; deploy lock {lock_s:.1f} s; deploy roll {roll_s:.1f} s (exit {rc})")
    for path in ("/opt/deploy/stacks/*/", "/root/ml-env", "/opt/deploy/stacks/.pip-cache", "/root/.cache/pip"):
        found = {p: n for p, n in sizes.items() if fnmatch.fnmatch(p.rstrip("/") + "/", path.rstrip("/") + "/")}
        for p, n in sorted(found.items()) or [(path, 0)]:
            print(f"  du -sb {p}: {n:,} bytes" + ("" if found else " (absent)"))
    if start and verdict:
        print(f"server start → the tool's verdict: {verdict[0] - start[0]:.1f} s\n  start: {start[1]}\n"
              f"  verdict: {verdict[1]}")
    if start and back:
        print(f"server start → previous release serving again: {back[0] - start[0]:.1f} s ({back[1].strip()})")
    print(f"a stack's own nvcc: {nvcc or '(none)'}")
    if tool is not None:
        print(f"doctor ct-toolchain: {tool.get('status')}: {tool.get('observed')}")
    print(f"after the roll: current {after} ({'R1' if after == r1 else 'NOT R1'}), /health {health}")
    print(f"wall time, fill to end: {time.monotonic() - wall0:.1f} s")
    return 0 if rc != 0 and after == r1 and health == "200" else 1


if __name__ == "__main__":
    sys.exit(main())
