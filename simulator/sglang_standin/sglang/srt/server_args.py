"""`sglang.srt.server_args` (simulated): the parts the deploy tool uses to validate a flag set.

`ServerArgs.add_cli_args(parser)` adds the installed release's real flags (from its schema), so the
recommended programmatic validation in reference/sglang.md §1.3 behaves as with the real package.
"""

from __future__ import annotations

import argparse
from typing import Any

from sglang._sim import flags
from sglang._sim.config_file import merge_config
from sglang._sim.env import installed_version


class ServerArgs:
    """Holds parsed args as attributes (the real class is a large dataclass)."""

    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        flags.add_cli_args(parser)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        return cls(**vars(args))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"ServerArgs({inner})"


def prepare_server_args(argv: list[str]) -> ServerArgs:
    parser = argparse.ArgumentParser(prog=flags.PROG)
    ServerArgs.add_cli_args(parser)
    if "--config" in argv:
        argv = merge_config(argv, parser, installed_version())
    return ServerArgs.from_cli_args(parser.parse_args(argv))
