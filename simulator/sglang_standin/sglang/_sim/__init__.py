"""Internals of the simulated sglang package (not part of sglang's API)."""
