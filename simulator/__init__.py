"""The simulated Proxmox VE GPU host used by `deploy sim` and the end-to-end tests.

The layout contract between the simulator's parts is docs/simulator.md; the shared models and paths are in
`simulator.config`. This package must stay cheap to import: the SSH session shell and the host-side
`pct`/`pvesh` stand-ins import it on every command, so nothing heavy (pydantic, cryptography) is imported here.
"""
