"""Issue 35's fleet figure: three hosts installed while the index publishes newer builds between them; without a
lock they differ (and status/plan name the difference once a lock exists), with a lock `pip freeze` and every
installed file's hash are identical on all three.

    python tests/perf/fleet_lock_identical.py [--time-scale 5]

Starts three simulated hosts (sim-N.., N from DEPLOY_SIM_FIRST, default 40) on their own root, converged from the
site template (their first stack adopted). Then:
  1. no lock: the profile moved to sglang 0.5.23; `up` sim-N (a new stack built by pip), then
     `deploy sim index publish torch 2.14.1+rebuild1` and `… flashinfer-python 0.7.2+cu130` (local builds that
     satisfy 0.5.23's exact pins ==2.14.1 and ==0.7.2 and sort above them), then `up` on the two others: their
     freezes differ.
  2. `deploy lock` (resolves today's index: torch 2.14.1+rebuild1, flashinfer 0.7.2+cu130); `status`/`plan` show each
     host's drift by name.
  3. with the lock: `up` the first host, publish torch 2.14.1+rebuild2 and a regressed flashinfer-python
     0.7.2+cu131 (`--regression nan`: an unlocked host would resolve it and fail the correctness gate), `up` the
     two others: all three identical.
"Identical" is `pip freeze --all` of the release's stack venv plus a sha256 over every dist-info RECORD line
(every installed file with its hash) except console scripts, whose shebang names the venv's path. Run as root.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e.conftest import DeployEnv, make_fleet_env, site_ostemplate  # noqa: E402

RENAMED = {"nsa-prefill-backend": None, "nsa-decode-backend": None,
           "dsa-prefill-backend": "trtllm", "dsa-decode-backend": "trtllm"}


def fingerprint(env: DeployEnv) -> tuple[str, list[str], str]:
    """(venv, pip freeze --all, sha256 over the RECORD lines) of the current release's stack."""
    meta = json.loads(env.ct("cat /var/lib/deploy/current/meta.json").stdout)
    venv = meta["stack"]["venv"]
    freeze = env.ct(f"{venv}/bin/python -m pip freeze --all --disable-pip-version-check").stdout.split()
    records = env.ct(f"cat {venv}/lib/python3*/site-packages/*.dist-info/RECORD | grep -v '^\\.\\./\\.\\./\\.\\./bin/' "
                     "| sort").stdout
    return venv, freeze, hashlib.sha256(records.encode()).hexdigest()


def show(title: str, hosts: list[DeployEnv]) -> bool:
    print(f"\n== {title}")
    prints = {h.host: fingerprint(h) for h in hosts}
    for name, (venv, freeze, digest) in prints.items():
        torch = next((f for f in freeze if f.startswith("torch==")), "?")
        fi = next((f for f in freeze if f.startswith("flashinfer-python==")), "?")
        print(f"{name}: {venv}  {len(freeze)} distributions, {torch}, {fi}, RECORD sha256 {digest[:16]}")
    same = len({(tuple(f), d) for _, f, d in prints.values()}) == 1
    if not same:
        first = set(next(iter(prints.values()))[1])
        for name, (_, freeze, _) in list(prints.items())[1:]:
            print(f"  {name} against {hosts[0].host}: +{sorted(set(freeze) - first)} -{sorted(first - set(freeze))}")
    print("identical pip freeze and file hashes on all three" if same else "the hosts differ")
    return same


def run(env: DeployEnv, *args: str) -> None:
    res = env.run(*args, timeout=900)
    print(f"$ deploy {' '.join(args)}  -> exit {res.rc}")
    if res.rc != 0:
        raise SystemExit(res.text[-3000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-perf-") as tmp:
        root = Path(tmp) / "sim"
        infos = sim_up(root, hosts=3, first=int(os.environ.get("DEPLOY_SIM_FIRST", "40")),
                       time_scale=args.time_scale)
        try:
            env = make_fleet_env(infos, Path(tmp), None, site_ostemplate(infos))
            hosts = [replace(env, sim=i) for i in infos]
            run(env, "up", "group", "prod", "--skip-bench", "--skip-weights")
            env.set_profile(sglang_version="0.5.23", flags=RENAMED)
            a, b, c = (i.name for i in infos)
            # 1. no lock, the index moving between the hosts
            run(env, "up", "host", a, "--skip-bench")
            run(env, "sim", "index", "publish", "torch", "2.14.1+rebuild1", "--root", str(root))
            run(env, "sim", "index", "publish", "flashinfer-python", "0.7.2+cu130", "--root", str(root))
            run(env, "up", "host", b, "--skip-bench")
            run(env, "up", "host", c, "--skip-bench")
            show("without a lock: the first host before the publish, the others after", hosts)
            # 2. a lock of today's index; status and plan name the drift
            run(env, "lock", "glm5-nvfp4", "--host", b)
            print("\n$ deploy status group prod --json  (stack_drift)")
            doc = env.run("--json", "status", "group", "prod").json
            for h in doc["hosts"]:
                print(f"{h['host']}: {h['report'].get('stack_drift')}")
            plan = env.run("plan", "host", a)
            print(f"$ deploy plan host {a}")
            print("\n".join(ln for ln in plan.text.splitlines() if "drift" in ln or "sglang_install" in ln))
            # 3. with the lock: another build published between the hosts
            run(env, "up", "host", a, "--skip-bench")
            run(env, "sim", "index", "publish", "torch", "2.14.1+rebuild2", "--root", str(root))
            run(env, "sim", "index", "publish", "flashinfer-python", "0.7.2+cu131", "--regression", "nan",
                "--root", str(root))
            run(env, "up", "host", b, "--skip-bench")
            run(env, "up", "host", c, "--skip-bench")
            ok = show("with the lock: torch 2.14.1+rebuild2 and a NaN flashinfer 0.7.2+cu131 published between the "
                      "first host and the others", hosts)
            drift = [h["report"].get("stack_drift") for h in env.run("--json", "status", "group", "prod").json["hosts"]]
            print(f"stack_drift after: {drift}")
            return 0 if ok else 1
        finally:
            sim_down(root)


if __name__ == "__main__":
    raise SystemExit(main())
