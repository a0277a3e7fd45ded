"""systemd stand-in for simulated containers: unit parsing, a detached supervisor, systemctl, journalctl."""
