"""sglang.srt (simulated): only server_args is provided."""
