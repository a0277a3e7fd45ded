"""deploy: converge a Proxmox VE GPU host into a tuned SGLang server."""

__version__ = "0.1.0"
#: The name pip knows it by (pyproject.toml); the command stays `deploy`, the import package `orchestrator`.
DISTRIBUTION = "pve-sglang-deploy"
