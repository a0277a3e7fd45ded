"""Issue 35's patch figure: the autotune patch's throughput gain, as the throughput gate of `deploy up` measures it.

    python tests/perf/autotune_patch.py [--time-scale 2] [--repeats 3] [--preset seed-c256]

Starts a simulated host (sim-N, N from DEPLOY_SIM_FIRST, default 94) from the site template, `up` with the bench
(the profile's stack, unpatched), then two stack changes, each an `up` that builds a new stack beside the running
one and measures the new release with its throughput step (`gate_repeats` bench runs of the preset, the median run
kept); the regression gate (orchestrator.gates.throughput.gate, what `roll` judges with) then judges each
measured release against the one before:
- control: a patch that only rewords a comment of model_runner.py (a new stack that changes nothing the server
  does): the gate's delta is the machine's noise;
- autotune: the shipped example patch (patches/sglang-autotune-flashinfer-cutlass.patch, for the profile's sglang
  0.5.12.post1), the profile's MoE runner backend flashinfer_cutlass: the server autotunes it at start.
Prints each gate's metrics (baseline → new, delta) as the roll's gate step does. Nothing is asserted: a
measurement of the gate's mechanics on the stand-in, whose tuned step is an assumed 1.15× (sglang/_sim/autotune.py),
not of the patch's worth on a real host. Run as root.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from one_host import template_host  # noqa: E402 - beside this script (tests/perf is sys.path[0])

from orchestrator.gates.throughput import gate as regression_gate  # noqa: E402
from orchestrator.inventory.example import AUTOTUNE_PATCH  # noqa: E402
from orchestrator.parsers.bench import BenchResult  # noqa: E402
from orchestrator.resources import example_inventory_dir  # noqa: E402
from tests.e2e.conftest import DeployEnv  # noqa: E402

CONTROL = "patches/control-comment-only.patch"


def control_patch() -> str:
    """A comment reworded in the same file: another stack, the same server behaviour."""
    text = (example_inventory_dir() / AUTOTUNE_PATCH).read_text()
    _, sep, body = text.partition("--- a/")
    enabled = '+            "flashinfer_cutlass",\n'
    start = body.index("+            # deploy example patch")
    control = ("+            # TODO (control patch, no behaviour change): flashinfer_cutlass compile errors\n"
               '+            # "flashinfer_cutlass",\n')
    body = body[:start] + control + body[start:].split(enabled, 1)[1]
    return sep + body


def measured_up(env: DeployEnv, what: str) -> dict:
    """`up` with its throughput step (the preset's bench, `gate_repeats` runs, the median run kept): what it built
    and the median run's result."""
    res = env.run("--json", "up", "host", env.host, "--bench", timeout=1800)  # measured even when nothing changed
    if res.rc != 0:
        raise SystemExit(f"{what}: up exit {res.rc}\n{res.text[-3000:]}")
    steps = {s["name"]: s for s in res.json["steps"]}
    bench = steps["throughput"]["details"]
    runs = (bench.get("repeats") or {}).get("output_throughput") or {}
    return {"install": steps["sglang_install"]["summary"], "result": BenchResult.model_validate(bench["result"]),
            "spread": runs}


def show(label: str, run: dict, baseline: dict, noise_pct: float) -> None:
    """The regression gate's own judgement (orchestrator.gates.throughput.gate) of `run` against `baseline`."""
    result = regression_gate(run["result"], baseline["result"], noise_pct=noise_pct)
    print(f"{label}: {run['install']}")
    spread = run["spread"]
    if spread:
        print(f"  {spread['n']} runs: mean {spread['mean']:.1f} tok/s, 95 % CI {spread['ci95_low']:.1f}.."
              f"{spread['ci95_high']:.1f}, spread {spread['min']:.1f}..{spread['max']:.1f}")
    print(f"  gate: {result.verdict}" + (f" ({result.reasons[0]})" if result.reasons else ""))
    for d in result.deltas:
        if d.baseline is not None and d.new is not None:
            print(f"  {d.label:<28} {d.baseline:>10.2f} → {d.new:>10.2f}  ({d.delta_pct:+.1f} %)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 256 streams on a 2-core machine: time_scale 2 keeps the stand-in's own CPU out of the figures (its README); the
    # e2e preset (256 prompts of 64 tokens at once, time_scale 5) is mostly ramp-up and spread ±10 % here.
    parser.add_argument("--time-scale", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="seed-c256")
    args = parser.parse_args()
    with template_host(args.time_scale, default_first=94) as (info, env, _root):
        env.set_profile(gate_repeats=args.repeats, bench_preset=args.preset)
        plain = measured_up(env, "unpatched")
        (env.inventory / "patches").mkdir(exist_ok=True)
        (env.inventory / CONTROL).write_text(control_patch())
        shutil.copy(example_inventory_dir() / AUTOTUNE_PATCH, env.inventory / AUTOTUNE_PATCH)
        env.set_profile(patches=[CONTROL])
        control = measured_up(env, "control")
        env.set_profile(patches=[AUTOTUNE_PATCH])
        tuned = measured_up(env, "autotune")
        journal = env.ct("journalctl -u sglang --no-pager -o cat | grep -c 'Running FlashInfer autotune with cache'")
    noise = float(env.profile_overrides.get("regression_threshold_pct", 5.0))
    print(f"{info.name}: time_scale {args.time_scale:g}, preset {args.preset}, gate_repeats {args.repeats} "
          f"(each up's throughput step keeps the median run; judged by the regression gate, noise ±{noise:g} %)")
    spread = plain["spread"]
    print(f"unpatched: {plain['install']}; median run {plain['result'].output_throughput:.1f} tok/s"
          + (f", {spread['n']} runs: mean {spread['mean']:.1f}, spread {spread['min']:.1f}..{spread['max']:.1f}"
             if spread else ""))
    show("control (comment-only patch) against unpatched", control, plain, noise)
    show("autotune patch against control", tuned, control, noise)
    show("autotune patch against unpatched", tuned, plain, noise)
    print(f"autotune log lines in the journal: {journal.stdout.strip() or '0'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
