"""sglang.srt.model_executor (simulated): only kernel_warmup is provided."""
