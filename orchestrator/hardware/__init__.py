"""GPU hardware health read on the PVE host: the Xid catalog, pure parsers of the sensors, and the typed state per
GPU that doctor and status show (docs/hardware.md). No I/O here: the facts (orchestrator/facts/host.py) read the
texts."""
