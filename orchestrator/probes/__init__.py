"""Probes shipped to the host or container and run there; their parsers and verdicts."""
