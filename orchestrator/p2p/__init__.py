"""GPU peer-to-peer: the topology and P2P-matrix parsers (parse.py), the P2P verdict (verdict.py), the bandwidth probe
(probe.py, shipped to the container) with its parser and verdict (bandwidth.py); the steps are
orchestrator/steps/p2p.py."""
