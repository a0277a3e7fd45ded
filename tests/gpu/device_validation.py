"""Run on a GPU machine (the `device` tool): the project's own parsers, P2P probe and telemetry sampler on live
nvidia-smi output and a real load. Writes the raw captures and a JSON report to $OUT.

Usage (repo root, torch in python3): PYTHONPATH=. python3 tests/gpu/device_validation.py
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from orchestrator.p2p.bandwidth import p2p_bandwidth_verdict, parse_p2p_probe, probe_command
from orchestrator.p2p.parse import parse_p2p
from orchestrator.p2p.verdict import p2p_verdict
from orchestrator.parsers.devices import nvidia_char_devices, parse_dev_listing, parse_gpu_list, parse_proc_devices
from orchestrator.parsers.dmon import parse_dmon
from orchestrator.parsers.driver import parse_driver_version
from orchestrator.parsers.gpu_query import parse_query_gpu
from orchestrator.parsers.topo import parse_topo
from orchestrator.telemetry.sampler import build_sampled_bench_script, parse_sampled_output, run_samples
from orchestrator.telemetry.summary import summarize
from orchestrator.verdicts.power import diagnose

OUT = Path(os.environ.get("OUT", "/tmp/device-out"))
CAP = Path("/tmp/device-capture")
CAPTURES = {
    "list.txt": "nvidia-smi -L",
    "topo-m.txt": "nvidia-smi topo -m",
    "topo-p2p-r.txt": "nvidia-smi topo -p2p r",
    "topo-p2p-w.txt": "nvidia-smi topo -p2p w",
    "topo-p2p-n.txt": "nvidia-smi topo -p2p n",
    "topo-p2p-a.txt": "nvidia-smi topo -p2p a",
    "topo-p2p-p.txt": "nvidia-smi topo -p2p p",
    "query-gpu.csv": "nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,driver_version,power.draw,power.limit,"
                     "utilization.gpu,memory.used,memory.total,temperature.gpu,clocks.sm,pcie.link.gen.max,"
                     "pcie.link.width.max --format=csv",
    "dmon-idle.txt": "nvidia-smi dmon -s pucvmet -o DT -c 3",
    "proc-driver-version.txt": "cat /proc/driver/nvidia/version",
    "proc-devices.txt": "cat /proc/devices",
    "ls-dev-nvidia.txt": "ls -l /dev/nvidia*",
}


def sh(cmd: str, timeout: float = 120) -> tuple[int, str]:
    res = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    return res.returncode, res.stdout + (res.stderr if res.returncode else "")


def main() -> int:
    CAP.mkdir(parents=True, exist_ok=True)
    report: dict[str, object] = {}
    texts: dict[str, str] = {}
    for name, cmd in CAPTURES.items():
        rc, text = sh(cmd)
        texts[name] = text
        (CAP / name).write_text(text)
        report.setdefault("capture_rc", {})[name] = rc  # type: ignore[index]

    parsed: dict[str, object] = {}
    topo = parse_topo(texts["topo-m.txt"])
    read, write = parse_p2p(texts["topo-p2p-r.txt"], "read"), parse_p2p(texts["topo-p2p-w.txt"], "write")
    verdict = p2p_verdict(topo, read, write)
    parsed["topo_gpus"] = list(topo.gpus)
    parsed["links"] = sorted({topo.link(a, b) for a, b in topo.gpu_pairs()})
    parsed["p2p_verdict"] = verdict.to_dict()
    for kind, f in (("nvlink", "n"), ("atomics", "a"), ("pcie", "p")):
        parsed[f"p2p_{kind}_all_ok"] = parse_p2p(texts[f"topo-p2p-{f}.txt"], kind).all_ok()  # type: ignore[arg-type]
    parsed["gpu_list"] = [g.name for g in parse_gpu_list(texts["list.txt"])]
    parsed["driver"] = parse_driver_version(texts["proc-driver-version.txt"]).version
    parsed["uvm_major"] = parse_proc_devices(texts["proc-devices.txt"]).get("nvidia-uvm")
    parsed["passthrough_nodes"] = [n.path for n in nvidia_char_devices(parse_dev_listing(texts["ls-dev-nvidia.txt"]))]
    parsed["query_rows"] = len(parse_query_gpu(texts["query-gpu.csv"]))
    parsed["dmon_idle_samples"] = len(parse_dmon(texts["dmon-idle.txt"]).samples)
    report["parsed"] = parsed

    # P2P copy probe, exactly as `deploy verify-p2p --bandwidth` ships it.
    rc, probe_out = sh(probe_command(sys.executable, "orchestrator/p2p/probe.py", size_mib=256), 300)
    (CAP / "p2p-probe.json").write_text(probe_out)
    probe = parse_p2p_probe(probe_out)
    links = {(int(a[3:]), int(b[3:])): topo.link(a, b) for a, b in topo.gpu_pairs()}
    report["p2p_bandwidth"] = p2p_bandwidth_verdict(probe, links).model_dump(mode="json")

    # Telemetry sampler around a real load; overhead = load throughput without vs with the samplers.
    load = f"{shlex.quote(sys.executable)} tests/gpu/gpu_load.py --seconds 15"
    t0 = time.monotonic()
    _, bare = sh(load, 120)
    bare_s = time.monotonic() - t0
    sampler = build_sampled_bench_script(load)
    _, out = sh(f"bash -c {shlex.quote(sampler.script)}", 180)
    (CAP / "sampled-load.txt").write_text(out)
    run = parse_sampled_output(out, sampler.nonce)
    samples, static = run_samples(run, sampler.query_fields)
    bare_tflops = json.loads(bare.strip().splitlines()[-1])["tflops"]
    sampled_tflops = json.loads(run.section("bench").strip().splitlines()[-1])["tflops"]
    overhead = (bare_tflops - sampled_tflops) / bare_tflops * 100 if bare_tflops else None
    summary = summarize(samples, window=(run.started_at, run.ended_at), static=static,
                        sampling_overhead_pct=overhead)
    report["load"] = {"bare_tflops": bare_tflops, "sampled_tflops": sampled_tflops, "bare_wall_s": bare_s,
                      "sampling_overhead_pct": overhead, "samples": len(samples)}
    report["telemetry"] = summary.model_dump(mode="json")
    report["diagnosis"] = [d.model_dump(mode="json") for d in diagnose(None, summary, tp_size=len(topo.gpus),
                                                                       nvlink=True)]
    with tarfile.open(OUT / "capture.tar.gz", "w:gz") as tar:
        tar.add(CAP, arcname="capture")
    (OUT / "device-report.json").write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps({"parsed": parsed, "p2p_bandwidth": report["p2p_bandwidth"]["summary"],  # type: ignore[index]
                      "load": report["load"],
                      "power_pct": [g["power_pct_of_limit"] for g in report["telemetry"]["gpus"]]},  # type: ignore[index]
                     indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
