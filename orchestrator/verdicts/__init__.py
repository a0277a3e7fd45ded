"""Pure verdicts: policy over parsed facts (host prerequisites, cluster, exposure, power, weights, fatal log
lines). No I/O; results serialise with to_dict(). The gates are in orchestrator/gates/, P2P in orchestrator/p2p/."""
