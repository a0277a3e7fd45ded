"""sglang.srt.model_executor.model_runner (simulated, sglang 0.5.23's shape): no autotune decision here.

Real 0.5.23 moved the decision to sglang/srt/model_executor/runner/flashinfer_autotune.py (`moe_needs_autotune`,
which lists flashinfer_cutlass), so a patch written against 0.5.12.post1's `_should_run_flashinfer_autotune` does not
apply to it (GNU patch: `Hunk #1 FAILED`), here as on the real wheel. This file replaces the tree's
0.5.12.post1-shaped model_runner.py in the stand-in's 0.5.23 wheel (simulator/software/wheels.py, RELEASES).
"""
