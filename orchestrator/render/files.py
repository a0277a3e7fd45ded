"""Rendered files, the Jinja environment, and the quoting rules of systemd unit files and EnvironmentFiles."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, field, replace

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from orchestrator.errors import ConfigError
from orchestrator.resources import templates_dir

#: The managed header: lines at the very top of a file that start with this marker are not part of the body
#: hash, so the release id and the hash itself can live in the file without changing the hash.
HEADER_MARK = "# deploy:"
REDACTED = "<redacted>"


@dataclass(frozen=True)
class RenderedFile:
    """One file as it will be installed. `sha256` covers the body (the managed header excluded)."""

    name: str
    remote_path: str
    mode: int
    content: str
    sha256: str
    secrets: tuple[str, ...] = field(default=(), repr=False, compare=False)

    @property
    def mode_octal(self) -> str:
        return f"{self.mode:04o}"

    @property
    def has_secret(self) -> bool:
        return bool(self.secrets)

    def redacted(self) -> RenderedFile:
        """A copy safe to print or log: every secret value replaced by <redacted> (sha256 stays the real one)."""
        text = self.content
        for s in self.secrets:
            text = text.replace(s, REDACTED)
            text = text.replace(escape_env_value(s), REDACTED)
            text = text.replace(json.dumps(s, ensure_ascii=True)[1:-1], REDACTED)
        return replace(self, content=text, secrets=())

    def to_dict(self) -> dict[str, object]:
        """Printable form; never carries a secret."""
        safe = self.redacted()
        return {"name": safe.name, "remote_path": safe.remote_path, "mode": safe.mode_octal,
                "sha256": safe.sha256, "redacted": self.has_secret, "content": safe.content}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def split_header(content: str) -> tuple[str, str]:
    """(managed header, body): the header is the leading run of lines starting with HEADER_MARK."""
    lines = content.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith(HEADER_MARK):
        n += 1
    return "".join(lines[:n]), "".join(lines[n:])


def body_sha256(content: str) -> str:
    """Hash of a file as installed, header excluded: compare with RenderedFile.sha256 to detect drift."""
    return sha256_text(split_header(content)[1])


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir())),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["exec_arg"] = systemd_exec_arg
    env.filters["env_value"] = env_file_value
    env.filters["yaml_str"] = yaml_str
    return env


def render_template(name: str, **context: object) -> str:
    return environment().get_template(name).render(**context)


# ------------------------------------------------------------------------------------------------ systemd
_EXEC_SAFE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


def systemd_exec_arg(arg: str, *, env_ref: bool = False) -> str:
    """One ExecStart argument written so systemd hands the program exactly `arg`.

    systemd resolves specifiers first (`%%` → `%`), then splits words honouring double quotes and C escapes
    (`\\\\`, `\\"`, `\\n`), then substitutes `$VAR`/`${VAR}` (`$$` → `$`). `env_ref=True` keeps `$` live for a
    deliberate `${VAR}` reference (the API key).
    """
    if "\x00" in arg:
        raise ConfigError(f"argument {arg!r} contains a NUL byte", fix="remove it")
    text = arg.replace("%", "%%")
    if not env_ref:
        text = text.replace("$", "$$")
    if arg and _EXEC_SAFE.match(arg):
        return text
    if arg == ";":
        return "\\;"
    escaped = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               .replace("\t", "\\t").replace("\r", "\\r"))
    return f'"{escaped}"'


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def escape_env_value(value: str) -> str:
    return (value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`"))


def env_file_value(value: str) -> str:
    """A value for systemd's EnvironmentFile= (also valid for `set -a; . file` in a shell): double-quoted, with
    `\\`, `"`, `$` and backquote escaped by a backslash. Newlines are refused: they are easy to get wrong."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ConfigError("an environment value contains a newline or NUL byte",
                          fix="use a single-line value (secrets included)")
    return f'"{escape_env_value(value)}"'


def yaml_str(value: str) -> str:
    """A YAML double-quoted scalar that loads back as exactly `value` (JSON string syntax, ASCII only)."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise ConfigError("a secret value contains a newline or NUL byte", fix="use a single-line value")
    return json.dumps(value, ensure_ascii=True)


def check_env_name(name: str) -> str:
    if not _ENV_NAME.match(name):
        raise ConfigError(f"environment name {name!r} is not a valid variable name", fix="use [A-Za-z_][A-Za-z0-9_]*")
    return name
