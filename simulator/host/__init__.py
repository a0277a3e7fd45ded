"""The simulated PVE node's own services: its sshd and host view (shell), the stand-in server that
answers `pct`, `pvesh`, `nvidia-smi` …, its systemd units and journal, what it offers its containers, and a reboot.
Imports nothing: the host's every command imports this package."""
