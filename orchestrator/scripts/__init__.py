"""Shell scripts the tool runs on the node or in the container, shipped as Jinja files next to this module.

Why files: a script reads as a script (shellcheck, syntax colouring, diffs) instead of Python string fragments.
Every parameter goes through the `q` filter (`shlex.quote`; `qjoin` for an argv) unless it is a number, a fixed
word or a command the caller built with the container adapter (already quoted); rendering is
strict, so a missing parameter fails loudly instead of becoming an empty string.
"""

from __future__ import annotations

import shlex
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

#: The scripts' own directory: they ship inside this package, beside the module that renders them (so this
#: layer of the tool, below every step and adapter, depends on nothing else of it).
SCRIPTS_DIR = Path(__file__).resolve().parent


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(SCRIPTS_DIR)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["qjoin"] = lambda argv: shlex.join(str(a) for a in argv)
    return env


def render_script(name: str, **params: Any) -> str:
    """The script `name` (e.g. "activate_release.sh.j2") with its parameters filled in."""
    return _env().get_template(name).render(**params)
