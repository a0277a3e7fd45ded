"""sglang.srt.model_executor.runner (simulated, 0.5.23): only the FlashInfer autotune decision is provided."""
