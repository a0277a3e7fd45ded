"""Issue 35's patch figure: the autotune patch's throughput gain, as the throughput gate of `deploy up` measures it.

    python tests/perf/autotune_patch.py [--time-scale 5] [--repeats 3] [--preset e2e]

Starts a simulated host (sim-N, N from DEPLOY_SIM_FIRST, default 94) from the site template, `up` with the bench
(R1: the profile's stack, unpatched; its bench is the baseline), then two stack changes, each an `up` that builds a
new stack beside the running one and gates the new release against the current one's throughput
(`gate_repeats` bench runs, their median):
- control: a patch that only rewords a comment of kernel_warmup.py (a new stack that changes nothing the server
  does): the gate's delta is the machine's noise;
- autotune: the shipped example patch (patches/sglang-autotune-flashinfer-cutlass.patch), the profile's MoE runner
  backend flashinfer_cutlass: the server autotunes it at start.
Prints each gate's metrics (baseline → new, delta) as `up` does. Nothing is asserted: a measurement. Run as root.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from one_host import template_host  # noqa: E402 - beside this script (tests/perf is sys.path[0])

from orchestrator.inventory.example import AUTOTUNE_PATCH  # noqa: E402
from orchestrator.resources import example_inventory_dir  # noqa: E402
from tests.e2e.conftest import DeployEnv  # noqa: E402

CONTROL = "patches/control-comment-only.patch"


def control_patch() -> str:
    """A comment reworded in the same file: another stack, the same server behaviour."""
    text = (example_inventory_dir() / AUTOTUNE_PATCH).read_text()
    _, sep, body = text.partition("--- a/")
    enabled = '+        "flashinfer_cutlass",\n'
    start = body.index("+        # deploy example patch")
    body = body[:start] + ("+        # TODO (control patch, no behaviour change): flashinfer_cutlass compile errors\n"
                           '+        # "flashinfer_cutlass",\n') + body[start:].split(enabled, 1)[1]
    return sep + body


def gated_up(env: DeployEnv, what: str) -> dict:
    res = env.run("--json", "up", "host", env.host, timeout=1800)
    if res.rc != 0:
        raise SystemExit(f"{what}: up exit {res.rc}\n{res.text[-3000:]}")
    steps = {s["name"]: s for s in res.json["steps"]}
    return {"install": steps["sglang_install"]["summary"], "gate": steps.get("gate", {}).get("details", {}),
            "verdict": steps.get("gate", {}).get("summary", "")}


def show(label: str, run: dict) -> None:
    print(f"{label}: {run['install']}")
    print(f"  gate: {run['verdict']}")
    for d in (run["gate"].get("gate") or {}).get("deltas", []):
        if d.get("baseline") is not None and d.get("new") is not None:
            print(f"  {d['label']:<28} {d['baseline']:>10.2f} → {d['new']:>10.2f}  ({d['delta_pct']:+.1f} %)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="e2e")
    args = parser.parse_args()
    with template_host(args.time_scale, default_first=94) as (info, env, _root):
        env.set_profile(gate_repeats=args.repeats, bench_preset=args.preset)
        first = env.run("--json", "up", "host", info.name, timeout=1800)
        if first.rc != 0:
            print(f"setup failed: up exit {first.rc}\n{first.text[-3000:]}")
            return 1
        (env.inventory / "patches").mkdir(exist_ok=True)
        (env.inventory / CONTROL).write_text(control_patch())
        shutil.copy(example_inventory_dir() / AUTOTUNE_PATCH, env.inventory / AUTOTUNE_PATCH)
        env.set_profile(patches=[CONTROL])
        control = gated_up(env, "control")
        env.set_profile(patches=[AUTOTUNE_PATCH])
        tuned = gated_up(env, "autotune")
        journal = env.ct("journalctl -u sglang --no-pager -o cat | grep -c 'Running FlashInfer autotune with cache'")
    print(f"{info.name}: time_scale {args.time_scale:g}, preset {args.preset}, gate_repeats {args.repeats} "
          "(each gate: the median of its runs against the current release's)")
    show("control (comment-only patch, new stack)", control)
    show("autotune patch (flashinfer_cutlass)", tuned)
    print(f"autotune log lines in the journal: {journal.stdout.strip() or '0'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
