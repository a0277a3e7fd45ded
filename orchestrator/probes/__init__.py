"""Programs shipped to the container and run there (flags, smoke, golden, weights). The watchdog's and the P2P
bandwidth probe live with their concern (orchestrator/watchdog/probe.py, orchestrator/p2p/probe.py)."""
