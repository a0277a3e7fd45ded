"""deploy: converge a Proxmox VE GPU host into a tuned SGLang server."""

__version__ = "0.1.0"
