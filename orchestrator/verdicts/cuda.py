"""The host driver against the CUDA the stack's torch is built for: judged before anything is built.

torch's Linux wheels carry their own CUDA runtime; the one host component they need is the driver, and the driver's
branch must be new enough for the CUDA major the wheel was built with. Both stacks deploy knows are CUDA 13 (their
torch requires `cuda-toolkit==13.0.x`), which needs an R580+ driver: on a 570/575 host the server would learn it only
after a multi-GB build, from torch's "The NVIDIA driver on your system is too old". So `doctor`, `plan` and `up`
(host_prereqs, before any stack is built) compare the host's loaded driver with what the profile's stack needs,
read from what the stack pins: its lock's torch, else the torch its sglang release pins.

Pure: values in, a finding out.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import ConfigError
from orchestrator.stacks.lock import parse_lock
from orchestrator.verdicts.host import Finding

#: sglang release → the torch it pins (`Requires-Dist: torch==…` in the released wheels' METADATA, read 2026-12-07).
SGLANG_TORCH = {"0.5.12.post1": "2.11.0", "0.5.23": "2.14.1"}
#: torch release → the CUDA toolkit its Linux x86_64 wheel requires (`Requires-Dist: cuda-toolkit[…]==X` in its
#: METADATA, as pip's install report gives it; copies in tests/fixtures/torch/).
TORCH_CUDA = {"2.11.0": "13.0.2", "2.14.1": "13.0.3"}
#: CUDA major → the oldest driver branch that runs it (NVIDIA's CUDA Compatibility guide, "Minor Version
#: Compatibility", Table 1: CUDA 13.x needs >= 580, CUDA 12.x >= 525).
CUDA_MIN_DRIVER = {13: 580, 12: 525}


@dataclass(frozen=True)
class StackCuda:
    """The CUDA a stack's torch is built for, and where deploy read which torch the stack has."""

    torch: str
    cuda: str
    source: str  # "the lock pins torch==2.11.0", "sglang 0.5.12.post1 pins torch==2.11.0"

    @property
    def min_driver(self) -> int | None:
        return CUDA_MIN_DRIVER.get(int(self.cuda.split(".")[0]))


def stack_cuda(sglang_version: str, lock_text: str | None = None) -> StackCuda | None:
    """The profile's stack's torch and its CUDA: the lock's torch when it is one the table knows, else the one the
    sglang release pins; None when neither is known (a stand-in torch, a release not in the table)."""
    if lock_text is not None:
        try:
            locked = parse_lock(lock_text, "lock").version_of("torch")
        except ConfigError:
            locked = None  # the loader refused it already; nothing to read here
        if locked is not None and locked in TORCH_CUDA:
            return StackCuda(locked, TORCH_CUDA[locked], f"the lock pins torch=={locked}")
    torch = SGLANG_TORCH.get(sglang_version.split("+", 1)[0])
    if torch is None or torch not in TORCH_CUDA:
        return None
    return StackCuda(torch, TORCH_CUDA[torch], f"sglang {sglang_version} pins torch=={torch}")


def driver_branch(version: str) -> int | None:
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else None


def stack_driver_finding(driver_version: str | None, need: StackCuda | None) -> Finding | None:
    """The host driver against the stack's CUDA; None when either is unknown (no driver: its own finding says so)."""
    if not driver_version or need is None or need.min_driver is None:
        return None
    branch = driver_branch(driver_version)
    if branch is None:
        return None
    what = f"CUDA {need.cuda} of the stack's torch {need.torch} ({need.source})"
    if branch >= need.min_driver:
        return Finding("stack-cuda", "ok", f"driver {driver_version} runs {what}: R{need.min_driver} or newer")
    return Finding("stack-cuda", "fail",
                   f"driver {driver_version} is older than R{need.min_driver}, which {what} needs: its server would "
                   "fail at start (torch: \"The NVIDIA driver on your system is too old\") after the stack's build",
                   f"install an NVIDIA driver of branch {need.min_driver} or newer on the host (open kernel modules) "
                   "and load it; `deploy up` then puts the same userspace driver in the container; or pin an "
                   f"sglang whose torch is built for a CUDA this driver runs (docs/troubleshooting.md"
                   "#the-host-driver-is-too-old-for-the-stacks-cuda)")
