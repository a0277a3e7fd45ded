"""bench_serving command lines built from a preset."""
