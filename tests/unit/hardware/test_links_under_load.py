"""Links judged under the load a command generates (orchestrator/hardware/links.py), on the real H200 captures:
the 250 ms sampler loop under load and the one-shot query with each GPU's bus id and link capability."""

from __future__ import annotations

import shlex

from orchestrator.hardware.links import (
    LINK_SAMPLER_FIELDS,
    LinkSample,
    bus_query_argv,
    framed,
    judge_links_under_load,
    link_sampler_argv,
    parse_bus_ids,
    parse_link_samples,
    samples_from_telemetry,
)
from orchestrator.hardware.state import LOAD_UTIL_PCT
from orchestrator.parsers.gpu_query import SAMPLER_FIELDS, parse_query_gpu
from orchestrator.parsers.hostfacts import PcieLink
from tests.shared import H200_NVLINK

LOOP = (H200_NVLINK / "query-loop-under-load.csv").read_text()
STATIC = parse_query_gpu((H200_NVLINK / "query-gpu.csv").read_text())  # with header: gen/width max
#: `nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader` on that box: the same columns of the capture.
BUSES = parse_bus_ids("".join(f"{line.split(', ')[0]}, {line.split(', ')[3]}\n"
                              for line in (H200_NVLINK / "query-gpu.csv").read_text().splitlines()[1:]))


def _stuck(text: str, gpu: int, gen: int) -> str:
    """The real loop with one GPU's `pcie.link.gen.current` column (the 7th) set to `gen`."""
    out = []
    for line in text.splitlines():
        cells = line.split(", ")
        if len(cells) == len(SAMPLER_FIELDS) and cells[1] == str(gpu):
            cells[6] = str(gen)
        out.append(", ".join(cells))
    return "\n".join(out) + "\n"


def test_the_real_loop_under_load_passes_with_each_gpus_slot() -> None:
    samples = samples_from_telemetry(parse_query_gpu(LOOP, SAMPLER_FIELDS), STATIC, BUSES)
    verdict = judge_links_under_load(samples, load="bench_serving", min_util_pct=LOAD_UTIL_PCT)
    assert verdict.ok and [g.status for g in verdict.gpus] == ["ok", "ok"]
    assert [g.bus_id for g in verdict.gpus] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert verdict.gpus[0].best == PcieLink(5, 16) and verdict.gpus[0].loaded == verdict.gpus[0].samples > 0
    assert verdict.summary().startswith("PCIe links under load: 2 of 2 GPU(s) at their capability")


def test_a_link_stuck_at_gen2_under_load_fails_naming_the_gpu_and_its_slot() -> None:
    samples = samples_from_telemetry(parse_query_gpu(_stuck(LOOP, 1, 2), SAMPLER_FIELDS), STATIC, BUSES)
    verdict = judge_links_under_load(samples, load="bench_serving", min_util_pct=LOAD_UTIL_PCT)
    assert not verdict.ok and [g.gpu for g in verdict.failures] == [1]
    bad = verdict.failures[0]
    assert bad.best == PcieLink(2, 16) and bad.below == bad.loaded
    assert bad.message("bench_serving").startswith(
        "GPU 1 (slot 00000000:00:07.0): PCIe link Gen2 x16 under bench_serving, below its capability Gen5 x16")
    doc = verdict.to_dict()
    assert doc["ok"] is False and doc["gpus"][1]["status"] == "fail" and "rtx6kpro#88" in doc["source"]


def _sample(gpu: int, gen: int, util: int) -> LinkSample:
    return LinkSample(gpu, f"00000000:{0x85 + gpu:02X}:00.0", PcieLink(gen, 16), PcieLink(5, 16), util)


def test_idle_downshifts_never_fail_and_an_idle_gpu_is_not_judged() -> None:
    # 1,000 idle samples at Gen1 (the idle downshift), then the load: the link trains to Gen5.
    idle = [_sample(g, 1, 0) for _ in range(125) for g in range(8)]
    assert len(idle) == 1000
    verdict = judge_links_under_load(idle, load="bench_serving", min_util_pct=LOAD_UTIL_PCT)
    assert verdict.ok and {g.status for g in verdict.gpus} == {"not-loaded"}
    assert "not judged, never loaded" in verdict.gpus[0].message("bench_serving")
    loaded = idle + [_sample(g, 5, 97) for g in range(8)]
    verdict = judge_links_under_load(loaded, load="bench_serving", min_util_pct=LOAD_UTIL_PCT)
    assert verdict.ok and {g.status for g in verdict.gpus} == {"ok"}
    # A copy matrix may leave utilization.gpu low: every sample counts, the best reading decides.
    copies = [_sample(0, 1, 0), _sample(0, 5, 0), _sample(5, 1, 0), _sample(5, 2, 0)]
    verdict = judge_links_under_load(copies, load="the P2P copy matrix", min_util_pct=None)
    assert [(g.gpu, g.status) for g in verdict.gpus] == [(0, "ok"), (5, "fail")]
    assert verdict.failures[0].name == "GPU 5 (slot 00000000:8A:00.0)"


def test_the_link_sampler_and_its_framed_output() -> None:
    argv = link_sampler_argv(100)
    assert argv[-2:] == ["-lms", "100"] and argv[1] == "--query-gpu=" + ",".join(LINK_SAMPLER_FIELDS)
    assert shlex.split(shlex.join(argv)) == argv
    assert bus_query_argv() == ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]
    assert BUSES == {0: "00000000:00:06.0", 1: "00000000:00:07.0"}
    rows = ("2026/12/04 12:40:01.100, 5, 00000000:85:00.0, 2, 5, 16, 16, 35\n"
            "2026/12/04 12:40:01.100, 6, 00000000:86:00.0, [N/A], 5, 16, 16, 0\n"
            "2026/12/04 12:40:01.200, 5, 00000000:85:00.0, 2, 5")  # the sampler stopped mid-line
    out = "{\"pairs\": []}\n@@deploy-ab12cd34 begin links\n" + rows + "\n@@deploy-ab12cd34 end links\n"
    text = framed(out, "@@deploy-ab12cd34", "links")
    assert text is not None and framed(out, "@@deploy-ffffffff", "links") is None
    samples = parse_link_samples(text)
    assert samples == (LinkSample(5, "00000000:85:00.0", PcieLink(2, 16), PcieLink(5, 16), 35),)
