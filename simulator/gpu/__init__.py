"""Simulated NVIDIA GPUs: profiles replaying real captures, nvidia-smi, /dev and /proc contents.

Part 1 of the simulator calls `create_uvm_nodes(host_dir)` (from its `nvidia-modprobe -u -c=0`),
`lspci_text(profile)` (its `lspci` script) and `pci_devices(profile)` (the API's /hardware/pci).
Stdlib-only: it runs under the system python in the SSH session's host view, and in a container from the
payload of the .run stand-in. The package imports nothing itself: `nvidia-smi` runs on every telemetry sample and
every facts read, and must not load the /dev provisioning it does not use; import from the modules.
"""
