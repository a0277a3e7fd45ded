"""Issue 35's kernel cache figure: a warm start against a cold one on the stand-in, in model time, from the boot
ledger (boot.jsonl, read by `deploy status --json`).

    DEPLOY_SIM_FIRST=130 python tests/perf/boot_ledger.py [--runs 2] [--time-scale 60] [--warm 240] [--cold 480]

Starts a simulated host (sim-N, N from DEPLOY_SIM_FIRST, default 94) from the site template, `up`, then sets the
stand-in's start to a GLM-5-like warm start of `--warm` model seconds (weights from the page cache, CUDA graphs) plus
`--cold` model seconds of JIT on an empty kernel cache, and rolls the MoE backend to flashinfer_trtllm (a new server
shape: its own, fresh cache directory, a cold start). Then `--runs` times the rollback cycle to the first release and
back: each start finds its own cache warm. Figures are the ledger's seconds times the time scale (model seconds).
Nothing is asserted: a measurement. Run as root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from one_host import template_host  # noqa: E402 - beside this script (tests/perf is sys.path[0])

from tests.e2e.conftest import DeployEnv  # noqa: E402

PHASES = ("imports", "startup", "weights", "autotune", "jit", "capture", "piecewise", "warmup")


def last_start(env: DeployEnv) -> tuple[str, dict[str, Any]]:
    """The current release and its last start's ledger entry, as `deploy status --json` reads them."""
    res = env.run("--json", "status", "host", env.host)
    if res.rc or res.json.get("boot") is None:
        raise SystemExit(f"status gave no boot ledger: {res.text[-2000:]}")
    return str(res.json["release"]), res.json["boot"]


def row(label: str, boot: dict[str, Any], scale: float) -> str:
    """One start in model seconds: total to first healthy, then each phase (`-`: it did not run)."""
    seconds = {p["name"]: p["seconds"] for p in boot["phases"]}
    phases = "  ".join(f"{p} {seconds[p] * scale:4.0f}" if seconds.get(p) is not None else f"{p} {'-':>4}"
                       for p in PHASES)
    cache = (boot.get("kernel_cache") or {}).get("state", "-")
    kind = "cold" if boot["cold"] else "warm"
    return f"{label:<46} {kind} {boot['total_s'] * scale:5.0f} s   {phases}   cache {cache}"


def must(env: DeployEnv, *args: str) -> None:
    res = env.run("--json", *args, timeout=900)
    if res.rc:
        raise SystemExit(f"{' '.join(args)} failed: {res.text[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=60.0)
    parser.add_argument("--warm", type=float, default=240.0, help="model seconds of a warm start")
    parser.add_argument("--cold", type=float, default=480.0, help="model seconds a cold start adds (JIT)")
    args = parser.parse_args()
    scale = args.time_scale
    with template_host(scale, default_first=94) as (info, env, _root):
        must(env, "up", "host", info.name, "--skip-bench")
        base, _ = last_start(env)
        env.ct_faults(warm_start_s=args.warm, cold_start_s=args.cold)
        must(env, "roll", "host", info.name, "--set", "moe-runner-backend=flashinfer_trtllm", "--skip-bench")
        tuned, cold = last_start(env)
        print(f"{info.name}: time scale {scale:g}; stand-in warm start {args.warm:g} model s, cold adds {args.cold:g}")
        print(row(f"cold: {tuned} (new shape)", cold, scale))
        warm: list[dict[str, Any]] = []
        for _ in range(args.runs):
            for to in (base, tuned):
                must(env, "rollback", "host", info.name, "--to", to)
                _, boot = last_start(env)
                print(row(f"warm: rollback to {to}", boot, scale))
                if to == tuned:
                    warm.append(boot)
        med = statistics.median(b["total_s"] for b in warm) * scale
        print(f"flashinfer_trtllm release: cold {cold['total_s'] * scale:.0f} s, warm median {med:.0f} s "
              f"(model seconds), warm/cold {med / (cold['total_s'] * scale):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
