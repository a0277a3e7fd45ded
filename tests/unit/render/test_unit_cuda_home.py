"""sglang.service's CUDA_HOME (issue 48 item 2): the CUDA the release's stack carries, inside its venv, else none."""

from __future__ import annotations

from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.loader import load_inventory
from orchestrator.render.files import split_header
from orchestrator.render.service import render_unit, unit_cuda_home
from tests.shared import EXAMPLE_INVENTORY

VENV = "/opt/deploy/stacks/0123456789ab"
HOME = f"{VENV}/lib/python3.13/site-packages/nvidia/cu13"


def example():
    inv = load_inventory(EXAMPLE_INVENTORY)
    profile = inv.profile_for(next(iter(inv.hosts.values())))
    return profile, canonicalize({}, FlagSchema.load(profile.sglang_version))


def test_the_unit_sets_cuda_home_to_the_stacks_own_cuda_and_hashes_it() -> None:
    profile, flags = example()
    with_home = render_unit(profile, flags, venv=VENV, cuda_home=HOME)
    without = render_unit(profile, flags, venv=VENV)
    assert f"\nEnvironment=CUDA_HOME={HOME}\n" in with_home.content
    assert "CUDA_HOME" not in without.content and with_home.sha256 != without.sha256  # `up` sees the change
    body = split_header(with_home.content)[1]
    assert body.index("EnvironmentFile=") < body.index("Environment=CUDA_HOME")


def test_a_cuda_home_outside_the_venv_or_unsafe_or_named_by_the_profile_is_not_set() -> None:
    profile, _ = example()
    assert unit_cuda_home(profile, HOME + "/", VENV) == HOME
    assert unit_cuda_home(profile, None, VENV) is None
    assert unit_cuda_home(profile, "/usr/local/cuda", VENV) is None  # not the stack's: flashinfer finds it itself
    assert unit_cuda_home(profile, f"{VENV}/lib/python3.13/../../../../etc", VENV) is None
    assert unit_cuda_home(profile, f"{VENV}/lib/python3.13/site-packages/nvidia/cu 13", VENV) is None
    own = profile.model_copy(update={"env": {**profile.env, "CUDA_HOME": "/opt/cuda"}})
    assert unit_cuda_home(own, HOME, VENV) is None
    assert unit_cuda_home(profile, f"{profile.venv}/lib/python3.11/site-packages/nvidia/cu13") is not None
