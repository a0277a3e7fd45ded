"""sglang.srt.model_executor (simulated): only where the release decides FlashInfer's MoE autotune is provided."""
