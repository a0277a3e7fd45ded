"""Simulated NVIDIA GPUs: profiles replaying real captures, nvidia-smi, /dev and /proc contents.

Part 1 of the simulator calls `create_uvm_nodes(host_dir)` (from its `nvidia-modprobe -u -c=0`),
`lspci_text(profile)` (its `lspci` script) and `pci_devices(profile)` (the API's /hardware/pci).
Stdlib-only: it runs under the system python in the SSH session's host view, and in a container from the
payload of the .run stand-in.
"""

from .devfs import create_uvm_nodes, lspci_text, pci_devices, provision_gpu_host
from .profiles import PROFILE_NAMES, GpuProfile, get_profile

__all__ = [
    "PROFILE_NAMES",
    "GpuProfile",
    "create_uvm_nodes",
    "get_profile",
    "lspci_text",
    "pci_devices",
    "provision_gpu_host",
]
