"""The container's merged GPU question (`--query-gpu` with the list's columns and the driver version), parsed on
the real captures, and the container_gpus / driver_userspace steps reading it."""

from __future__ import annotations

import pytest

from orchestrator.errors import CheckFailed
from orchestrator.parsers.ct_gpus import CT_GPU_FIELDS, CT_GPU_QUERY, parse_ct_gpus
from orchestrator.parsers.devices import parse_gpu_list
from orchestrator.parsers.gpu_query import parse_header
from tests.shared import H200_NVLINK, NVIDIA_SMI
from tests.unit.steps.conftest import out


def _first_columns(capture: str, n: int) -> str:
    """The capture cut to its first n columns: what the merged query prints (its columns are the captures' first)."""
    return "".join(", ".join(line.split(", ")[:n]) + "\n" for line in capture.splitlines())


@pytest.mark.parametrize("capture", ["h200x2-nvlink", "h200x2-device"])
def test_merged_query_gives_the_list_and_the_driver_of_the_real_captures(capture: str) -> None:
    text = (NVIDIA_SMI / capture / "query-gpu.csv").read_text()
    assert [n for n, _ in parse_header(text.splitlines()[0])][:len(CT_GPU_FIELDS)] == list(CT_GPU_FIELDS)
    for shown in (text, _first_columns(text, len(CT_GPU_FIELDS))):  # every column, and the query's own
        answer = parse_ct_gpus(shown, "", 0)
        assert answer.status.ok and answer.driver_version == "580.159.04"
        listed = parse_gpu_list((NVIDIA_SMI / capture / "list.txt").read_text())
        assert list(answer.gpus) == listed  # the same GPUs, names and UUIDs as `nvidia-smi -L` said


def test_merged_query_failures_are_classified_as_before() -> None:
    mismatch = parse_ct_gpus("Failed to initialize NVML: Driver/library version mismatch\n"
                             "NVML library version: 580.65\n", "", 18)
    assert mismatch.status.state == "version_mismatch" and mismatch.status.library_version == "580.65"
    assert parse_ct_gpus("No devices were found\n", "", 6).status.state == "no_devices"
    assert parse_ct_gpus("", "sh: 1: nvidia-smi: not found\n", 127).missing
    assert parse_ct_gpus("GPU 0: NVIDIA H200 (UUID: GPU-1)\n", "", 0).status.state == "error"  # not CSV
    two = "index, uuid, name, pci.bus_id, driver_version\n0, GPU-a, X, 0:1, 580.65\n1, GPU-b, X, 0:2, 580.65.06\n"
    assert parse_ct_gpus(two, "", 0).driver_version is None  # rows that disagree name no version
    assert parse_ct_gpus(two.replace("580.65.06", "580.65"), "", 0).driver_version == "580.65"  # text, not 580.6
    assert CT_GPU_QUERY == "nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,driver_version --format=csv"


def test_container_gpus_counts_the_gpus_of_the_one_answer(make_run) -> None:
    capture = (H200_NVLINK / "query-gpu.csv").read_text()
    with pytest.raises(CheckFailed) as err:
        make_run({}, {"gpus": capture}).step("container_gpus")  # the inventory expects 8
    assert "the container sees 2 GPU(s), the inventory expects 8" in err.value.what
    with pytest.raises(CheckFailed) as err:
        make_run({}, {"gpus": out("No devices were found\n", 6)}).step("container_gpus")
    assert "nvidia-smi failed in the container: No devices were found" in err.value.what
