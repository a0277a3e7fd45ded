"""The flag schema of one sglang release: one entry per argparse action of `sglang.launch_server`.

The format is what the real parser dumps (`option_strings, dest, nargs, choices, type, default, action, required,
help`): the packaged files under `schemas/` were written that way, and `FlagSchema.from_dump` reads the same list
produced in the container by the sglang that is actually installed. Name resolution follows argparse with
`allow_abbrev=True` (Python 3.11): an exact option string wins; otherwise every option string that starts with the
given text is a match; one match resolves, several are ambiguous, none is unknown.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.errors import ConfigError
from orchestrator.redact import is_secret_key
from orchestrator.resources import flag_schemas_dir

Kind = Literal["switch", "bool_optional", "value", "help"]

_REQUIRED_KEYS = ("option_strings", "dest", "nargs", "action")


def _named_secret(entry: Mapping[str, Any]) -> bool:
    """A text option (`--admin-api-key KEY`) whose dest names a secret, as the redactor reads mapping keys."""
    return (entry.get("type") in (None, "str") and entry.get("nargs") is None and entry.get("action") == "_StoreAction"
            and is_secret_key(str(entry["dest"])))


@dataclass(frozen=True)
class FlagSpec:
    """One argparse action."""

    option_strings: tuple[str, ...]
    dest: str
    nargs: int | str | None
    choices: tuple[Any, ...] | None
    type: str | None
    default: Any
    action: str
    required: bool = False
    help: str = ""
    #: A secret value (a key, a password): kept out of argv, units, meta files and output. The dump may say so
    #: (`"secret": true`); otherwise a single text value whose dest's last word names a secret (`api_key`,
    #: `admin_api_key`, `ssl_keyfile_password`; not the figures `bucket_time_to_first_token`) marks it.
    secret: bool = False

    @property
    def kind(self) -> Kind:
        if self.action == "_HelpAction" or self.action == "_VersionAction":
            return "help"
        if self.action == "BooleanOptionalAction":
            return "bool_optional"
        if self.nargs == 0:
            return "switch"
        return "value"

    @property
    def long_options(self) -> tuple[str, ...]:
        return tuple(o for o in self.option_strings if o.startswith("--"))

    @property
    def canonical(self) -> str:
        """Rendered name, without dashes: `--` + dest with '-' for '_' when it is one of the option strings (the
        name that tends to survive renames), else the first long option string."""
        by_dest = "--" + self.dest.replace("_", "-")
        if by_dest in self.option_strings:
            return by_dest[2:]
        longs = self.long_options
        return (longs[0] if longs else self.option_strings[0]).lstrip("-")

    @property
    def negative_option(self) -> str | None:
        """`--no-x` of a BooleanOptionalAction."""
        for opt in self.option_strings:
            if opt.startswith("--no-"):
                return opt
        return None

    @property
    def takes_list(self) -> bool:
        return self.nargs in ("+", "*") or (isinstance(self.nargs, int) and self.nargs > 1)

    @property
    def deprecated(self) -> bool:
        return self.action.startswith("Deprecated") or "deprecated" in self.help.lower()

    def describe(self) -> str:
        opts = ", ".join(self.option_strings)
        extra = ""
        if self.choices:
            extra = " {" + ",".join(str(c) for c in self.choices) + "}"
        elif self.type:
            extra = f" <{self.type}>"
        return f"{opts}{extra}"


@dataclass(frozen=True)
class Resolved:
    spec: FlagSpec
    option: str  # the option string argparse would have picked
    exact: bool


class ResolveError(Exception):
    """Name did not resolve; `kind` is 'unknown' or 'ambiguous'; `candidates` are option strings."""

    def __init__(self, kind: Literal["unknown", "ambiguous"], name: str, candidates: Sequence[str]) -> None:
        self.kind = kind
        self.name = name
        self.candidates = list(candidates)
        super().__init__(f"{kind} flag {name}")


@dataclass(frozen=True)
class FlagSchema:
    version: str
    specs: tuple[FlagSpec, ...]
    _by_option: Mapping[str, FlagSpec] = field(repr=False, compare=False, hash=False, default_factory=dict)

    # ----------------------------------------------------------------------------------------------- loading
    @staticmethod
    def known_versions() -> list[str]:
        return sorted(p.name[len("sglang-"):-len(".json")] for p in flag_schemas_dir().glob("sglang-*.json"))

    @classmethod
    def load(cls, version: str) -> FlagSchema:
        """The packaged schema of an sglang release; unknown version → ConfigError naming the known ones."""
        return _load_packaged(version)

    @classmethod
    def from_dump(cls, data: Sequence[Mapping[str, Any]] | str, version: str = "installed") -> FlagSchema:
        """A schema from the dump format (a list of action objects, or its JSON text)."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"sglang flag dump ({version}) is not JSON: {exc}",
                                  fix="re-run the flag dump in the container; it must print one JSON list") from exc
        if not isinstance(data, list) or not data:
            raise ConfigError(f"sglang flag dump ({version}) must be a non-empty JSON list of argparse actions",
                              fix="re-run the flag dump in the container")
        specs: list[FlagSpec] = []
        for i, entry in enumerate(data):
            if not isinstance(entry, Mapping) or any(k not in entry for k in _REQUIRED_KEYS):
                raise ConfigError(f"sglang flag dump ({version}) entry {i} lacks one of {', '.join(_REQUIRED_KEYS)}",
                                  fix="the dump must hold one object per argparse action")
            opts = entry["option_strings"]
            if not isinstance(opts, list) or not opts or not all(isinstance(o, str) for o in opts):
                # positionals have no option strings; sglang's server parser has none, skip defensively
                continue
            choices = entry.get("choices")
            specs.append(FlagSpec(
                option_strings=tuple(opts),
                dest=str(entry["dest"]),
                nargs=entry.get("nargs"),
                choices=tuple(choices) if isinstance(choices, list) and choices else None,
                type=entry.get("type"),
                default=entry.get("default"),
                action=str(entry["action"]),
                required=bool(entry.get("required", False)),
                help=str(entry.get("help") or ""),
                secret=bool(entry.get("secret", _named_secret(entry))),
            ))
        by_option: dict[str, FlagSpec] = {}
        for spec in specs:
            for opt in spec.option_strings:
                by_option[opt] = spec
        return cls(version=version, specs=tuple(specs), _by_option=by_option)

    # ----------------------------------------------------------------------------------------------- lookup
    @property
    def option_strings(self) -> list[str]:
        return list(self._by_option)

    def by_dest(self, dest: str) -> FlagSpec | None:
        for spec in self.specs:
            if spec.dest == dest:
                return spec
        return None

    def by_option(self, option: str) -> FlagSpec | None:
        return self._by_option.get(option)

    def resolve(self, name: str) -> Resolved:
        """argparse's lookup for `--name` (leading dashes optional): exact, else unique prefix of a `--` option."""
        opt = name if name.startswith("-") else "--" + name
        if opt in self._by_option:
            return Resolved(self._by_option[opt], opt, True)
        if opt.startswith("--") and len(opt) > 2:
            matches = [o for o in self._by_option if o.startswith(opt)]
            if len(matches) == 1:
                return Resolved(self._by_option[matches[0]], matches[0], False)
            if len(matches) > 1:
                raise ResolveError("ambiguous", opt, matches)
        raise ResolveError("unknown", opt, [])


@functools.lru_cache(maxsize=16)
def _load_packaged(version: str) -> FlagSchema:
    path = flag_schemas_dir() / f"sglang-{version}.json"
    if not path.is_file():
        known = ", ".join(FlagSchema.known_versions()) or "none"
        raise ConfigError(f"no packaged flag schema for sglang {version} (known: {known})",
                          fix="pin the profile's sglang_version to a known release, or validate against the "
                              "installed sglang's own flag dump")
    return FlagSchema.from_dump(json.loads(path.read_text()), version=version)


_VERSION = re.compile(r"(?P<release>\d+(?:\.\d+)*)(?:\.?(?P<pre>a|b|rc)(?P<pre_n>\d*))?"
                      r"(?:\.?post(?P<post>\d*))?(?:\.?dev(?P<dev>\d*))?")


def version_key(version: str) -> tuple[tuple[int, ...], int, int, int]:
    """Sort key of a PEP 440 style release (0.5.12.post1 < 0.5.23, 0.5.0rc2 < 0.5.0); unparsable sorts first."""
    m = _VERSION.fullmatch(version.strip().lstrip("vV"))
    if m is None:
        return ((), 0, 0, 0)
    release = tuple(int(p) for p in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    pre = {"a": -3, "b": -2, "rc": -1}.get(m["pre"] or "", 0)
    dev = -1 if m["dev"] is not None and not m["pre"] and m["post"] is None else 0
    post = int(m["post"] or 0) + 1 if m["post"] is not None else 0
    return (release, min(pre, dev) if pre or dev else 0, int(m["pre_n"] or 0), post)


def other_schemas(version: str) -> Iterable[FlagSchema]:
    """Packaged schemas of every other known release (for rename hints)."""
    for v in FlagSchema.known_versions():
        if v != version:
            yield FlagSchema.load(v)
