"""The stand-in sglang's core metadata against the released wheels' (tests/fixtures/sglang/wheels/<v>/METADATA,
provenance in its README), issue 48 item 5: the extras are the real ones, and every requirement the stand-in
declares is the real release's, but for the differences named below (still a stand-in, docs/simulator.md)."""

from __future__ import annotations

from email.parser import Parser
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from simulator.software.wheels import metadata_text, sglang_spec

WHEELS = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "wheels"
RELEASES = ("0.5.12.post1", "0.5.23")
#: What the stand-in still declares otherwise than the release, by (release, name), and why it cannot be the real
#: one: the stand-in carries no transformers, so it declares the huggingface_hub range transformers' pin implies
#: (sglang's `hf` comes with it, and deploy must not replace that hub) and pyyaml, which the stand-in server itself
#: imports to read `--config` files (real sglang gets it through huggingface_hub and transformers). Every pin the
#: stand-in models (torch, sglang-kernel, flashinfer-python with its extras, flashinfer-cubin, kernels) is real.
STILL_STAND_IN = {
    ("0.5.12.post1", "huggingface-hub"): "(through transformers==5.6.0)",
    ("0.5.12.post1", "pyyaml"): "(through huggingface-hub; the stand-in reads --config files with it)",
    ("0.5.23", "huggingface-hub"): "(through transformers==5.19.0)",
    ("0.5.23", "pyyaml"): "(through huggingface-hub; the stand-in reads --config files with it)",
}
#: The pins below sglang the stand-in models with stand-in wheels of the real names and versions (wheels.py).
MODELLED = {"0.5.12.post1": {"torch", "sglang-kernel", "flashinfer-python", "flashinfer-cubin", "kernels"},
            "0.5.23": {"torch", "sglang-kernel", "flashinfer-python", "kernels"}}


def _meta(text: str) -> tuple[dict[str, Requirement], list[str]]:
    """The requirements that apply to a Linux x86_64 CPython 3.11 without extras, by name, and the extras."""
    msg = Parser().parsestr(text)
    env = {**default_environment(), "sys_platform": "linux", "platform_machine": "x86_64", "extra": ""}
    reqs = {}
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            reqs[canonicalize_name(req.name)] = req
    return reqs, list(msg.get_all("Provides-Extra") or [])


@pytest.mark.parametrize("release", RELEASES)
def test_the_stand_ins_extras_are_the_real_ones(release: str) -> None:
    _, real = _meta((WHEELS / release / "METADATA").read_text(encoding="utf-8"))
    _, mine = _meta(metadata_text(sglang_spec(release)))
    assert mine == real
    assert "srt" not in mine  # neither release has it: `sglang[srt]` makes pip warn and install the plain release


@pytest.mark.parametrize("release", RELEASES)
def test_every_requirement_the_stand_in_declares_is_the_real_one_but_the_named_differences(release: str) -> None:
    real, _ = _meta((WHEELS / release / "METADATA").read_text(encoding="utf-8"))
    mine, _ = _meta(metadata_text(sglang_spec(release)))
    differ = {name for name, req in mine.items()
              if name not in real or (req.specifier, req.extras) != (real[name].specifier, real[name].extras)}
    assert differ == {name for r, name in STILL_STAND_IN if r == release}
    shared = set(mine) & set(real) - differ
    assert {"aiohttp", "requests", "tqdm"} | MODELLED[release] <= shared  # real names, pins and extras
    for name in MODELLED[release]:
        assert str(mine[name]) == str(real[name]), (mine[name], real[name])  # spelled as the real wheel spells it
    assert all(name not in real for r, name in STILL_STAND_IN if r == release)  # neither is a direct pin
