"""GPU telemetry during a benchmark: sampler script builders and the per-GPU summary."""
