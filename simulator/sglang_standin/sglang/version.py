"""`from sglang.version import __version__`, as in the real package."""

from sglang import __version__

__all__ = ["__version__"]
