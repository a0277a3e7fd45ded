"""The gates a release passes besides health and smoke (docs/gates.md): correctness (correctness.py, golden.yaml)
and throughput (throughput.py, the regression gate against the baseline). Pure; their steps are
steps/correctness.py and the `gate` step."""
