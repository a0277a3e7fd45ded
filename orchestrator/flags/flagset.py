"""A validated, canonical set of sglang server flags and the operations a rollout needs on it.

`canonicalize` turns what a profile or `--set` wrote (aliases, argparse abbreviations, YAML scalars) into one
canonical long name per action with a typed value, or raises one ConfigError listing every problem with a close
match and, where the flag exists in another known sglang release, the name it has in this one.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.errors import ConfigError
from orchestrator.flags.limits import VALUE_FIX, FlagValue, command_line_problem, flag_value_problem
from orchestrator.flags.schema import FlagSchema, FlagSpec, ResolveError, other_schemas, version_key
from orchestrator.redact import REDACTED, SECRET_REF, is_secret_key, register_secret

Scalar = str | int | float
CanonValue = bool | Scalar | list[Scalar]

#: Flags that come from the profile's own fields (or the env file), never from `flags:` / `--set`.
RESERVED_DESTS: Mapping[str, str] = {
    "model_path": "model_path",
    "served_model_name": "served_model_name",
    "host": "host",
    "port": "port",
    "api_key": "api_key (a SecretRef; the unit reads it from the env file)",
}

_NEG_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?\s*[kKmMgGtT]?$")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True)
class FlagProblem:
    flag: str
    error: str
    suggestion: str = ""
    #: What the fix is about: the flag's name, its value (a type or choice it does not fit), or the KEY=VALUE form.
    kind: Literal["name", "value", "syntax"] = "name"

    def text(self) -> str:
        return f"{self.flag}: {self.error}" + (f" — {self.suggestion}" if self.suggestion else "")


@dataclass(frozen=True)
class FlagSet:
    """Canonical flags (name without dashes → typed value), sorted by name; rendered by `argv()`."""

    schema: FlagSchema = field(compare=False, repr=False)
    values: Mapping[str, CanonValue]
    renamed: Mapping[str, str] = field(default_factory=dict, compare=False)  # written → canonical
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def version(self) -> str:
        return self.schema.version

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def __len__(self) -> int:
        return len(self.values)

    def get(self, name: str) -> CanonValue | None:
        return self.values.get(name)

    def as_dict(self) -> dict[str, CanonValue]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.values.items()}

    def argv(self, without: Iterable[str] = ()) -> list[str]:
        return [word for group in self.argv_groups(without) for word in group]

    def argv_groups(self, without: Iterable[str] = ()) -> list[list[str]]:
        """One list per flag (`['--tp-size', '8']`), sorted by canonical name; omitted switches give none, and so
        do the names in `without` (the secret flags, which sglang reads from its `--config` file)."""
        out: list[list[str]] = []
        skip = set(without)
        for name in sorted(n for n in self.values if n not in skip):
            spec = self.schema.by_option("--" + name)
            assert spec is not None, name
            group = _render(spec, name, self.values[name])
            if group:
                out.append(group)
        return out


def _render(spec: FlagSpec, name: str, value: CanonValue) -> list[str]:
    opt = "--" + name
    kind = spec.kind
    if kind == "switch":
        return [opt] if value is True else []
    if kind == "bool_optional":
        neg = spec.negative_option
        return [opt] if value is True else ([neg] if neg else [])
    if value is True:  # nargs='?' given without a value
        return [opt]
    if isinstance(value, list):
        return [opt, *(_fmt(v) for v in value)]
    text = _fmt(value)
    if text.startswith("-") and not _NEG_NUMBER.match(text):
        return [f"{opt}={text}"]  # argparse would read a bare '-x' as an option
    return [opt, text]


def _fmt(v: Scalar) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


# ------------------------------------------------------------------------------------------------ resolution
def _resolve(schema: FlagSchema, written: str) -> tuple[FlagSpec | None, str | None, FlagProblem | None]:
    """→ (spec, option string matched, problem)."""
    name = written.strip()
    try:
        r = schema.resolve(name)
    except ResolveError as err:
        return None, None, _problem_for(schema, name, err)
    if r.spec.kind == "help":
        return None, None, FlagProblem(r.option, "is not a server flag (argparse help)")
    return r.spec, r.option, None


def _problem_for(schema: FlagSchema, name: str, err: ResolveError) -> FlagProblem:
    opt = err.name
    hint = rename_hint(schema, opt)
    if err.kind == "ambiguous":
        msg = (f"ambiguous in sglang {schema.version}: {opt} is a prefix of "
               f"{', '.join(sorted(err.candidates))}")
        return FlagProblem(opt, msg, hint or "write the full flag name")
    close = difflib.get_close_matches(opt, [o for o in schema.option_strings if o.startswith("--")], n=3, cutoff=0.6)
    parts = []
    if hint:
        parts.append(hint)
    if close and not (hint and close[0] in hint):
        parts.append("did you mean " + " or ".join(close) + "?")
    return FlagProblem(opt, f"unknown flag in sglang {schema.version}", "; ".join(parts))


def rename_hint(schema: FlagSchema, option: str) -> str:
    """When `option` is a flag of another known release but not of `schema`, say what it is called here.

    The wording follows the direction of time: a flag of an OLDER release was removed or renamed in `schema`;
    a flag of a NEWER release was added (or renamed) after `schema`, so the older name is offered, or none.
    """
    for other in other_schemas(schema.version):
        try:
            found = other.resolve(option)
        except ResolveError:
            continue
        if not found.exact:
            continue
        theirs = found.spec
        same_dest = schema.by_dest(theirs.dest)
        if same_dest is not None:
            return (f"{option} is a flag of sglang {other.version}; in {schema.version} it is "
                    f"--{same_dest.canonical}")
        if version_key(other.version) > version_key(schema.version):
            return _newer_flag_hint(schema, other, theirs, option)
        new = _rename_candidates(schema, other, theirs)
        if not new:
            return f"{option} exists in sglang {other.version} but was removed in {schema.version}"
        if len(new) > 1:
            return (f"{option} exists in sglang {other.version}; in {schema.version} it was split into "
                    + ", ".join("--" + s.canonical for s in new))
        return f"renamed to --{new[0].canonical} in {schema.version}? ({option} exists in sglang {other.version})"
    return ""


def _newer_flag_hint(schema: FlagSchema, newer: FlagSchema, spec: FlagSpec, option: str) -> str:
    """`option` exists only in a release newer than `schema`: name the older flag it grew out of, if any."""
    upgrade = f"pin sglang_version {newer.version} to use it"
    merged = [s for s in schema.specs if s.kind == spec.kind and spec.dest.startswith(s.dest + "_")
              and newer.by_dest(s.dest) is None]
    if merged:
        old = max(merged, key=lambda s: len(s.dest))
        return (f"{option} was added in sglang {newer.version}, which split --{old.canonical} of "
                f"{schema.version}; in {schema.version} use --{old.canonical}, or {upgrade}")
    older = _rename_candidates(schema, newer, spec)  # flags of `schema` that `newer` no longer has
    if len(older) == 1:
        return (f"{option} is the sglang {newer.version} name; {schema.version} calls it "
                f"--{older[0].canonical}? (or {upgrade})")
    return f"{option} was added in sglang {newer.version}; {schema.version} does not have it ({upgrade})"


def _rename_candidates(schema: FlagSchema, other: FlagSchema, old: FlagSpec) -> list[FlagSpec]:
    old_dests = {s.dest for s in other.specs}
    fresh = [s for s in schema.specs if s.dest not in old_dests and s.kind == old.kind]
    split = [s for s in fresh if s.dest.startswith(old.dest + "_")]
    if split:
        return sorted(split, key=lambda s: s.canonical)
    suffix = old.dest.split("_", 1)[1] if "_" in old.dest else old.dest
    scored: list[tuple[float, FlagSpec]] = []
    for s in fresh:
        help_sim = difflib.SequenceMatcher(None, old.help.lower(), s.help.lower()).ratio()
        name_sim = difflib.SequenceMatcher(None, old.dest, s.dest).ratio()
        choice_sim = 0.0
        if old.choices and s.choices:
            a, b = {str(c) for c in old.choices}, {str(c) for c in s.choices}
            choice_sim = len(a & b) / len(a | b)
        suffix_bonus = 1.0 if s.dest.endswith("_" + suffix) or s.dest == suffix else 0.0
        score = 0.35 * help_sim + 0.25 * name_sim + 0.2 * choice_sim + 0.2 * suffix_bonus
        scored.append((score, s))
    scored.sort(key=lambda t: (-t[0], t[1].canonical))
    if scored and scored[0][0] >= 0.55:
        return [scored[0][1]]
    return []


# ------------------------------------------------------------------------------------------------ values
class _ValueError(Exception):
    pass


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise _ValueError(f"takes true or false (it is an on/off switch), got {value!r}")


def _scalar(spec: FlagSpec, value: Any) -> Scalar:
    t = spec.type
    if isinstance(value, bool):
        raise _ValueError(f"takes a {t or 'str'} value, got {value!r}; quote it if you mean the text")
    if isinstance(value, (list, dict)):
        raise _ValueError(f"takes one {t or 'str'} value, got a list")
    out: Scalar
    if t == "int":
        if isinstance(value, float) and not value.is_integer():
            raise _ValueError(f"takes an integer, got {value!r}")
        try:
            out = int(value)
        except (TypeError, ValueError):
            raise _ValueError(f"takes an integer, got {value!r}") from None
    elif t == "float":
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise _ValueError(f"takes a number, got {value!r}") from None
    elif t == "human_readable_int":
        if isinstance(value, int):
            out = value
        elif isinstance(value, str) and _HUMAN_INT.match(value.strip()):
            out = int(value) if value.strip().isdigit() else value.strip()
        else:
            raise _ValueError(f"takes an integer such as 131072 or 128k, got {value!r}")
    elif t in ("loads", "json_list_type"):
        text = value if isinstance(value, str) else json.dumps(value)
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _ValueError(f"takes a JSON string, got {value!r} ({exc.msg})") from None
        if t == "json_list_type" and not isinstance(parsed, list):
            raise _ValueError(f"takes a JSON list, got {value!r}")
        out = text
    else:  # str, nullable_str, None (argparse default str) and sglang's own parse_* callables
        out = value if isinstance(value, str) else _fmt(value)
    if spec.choices is not None and str(out) not in {str(c) for c in spec.choices}:
        raise _ValueError(f"invalid choice {out!r}; choose from {', '.join(str(c) for c in spec.choices)}")
    return out


def _convert(spec: FlagSpec, value: Any) -> CanonValue | None:
    """Typed value, or None when the flag is to be omitted (a switch set to false)."""
    kind = spec.kind
    if kind == "switch":
        return True if _to_bool(value) else None
    if kind == "bool_optional":
        return _to_bool(value)
    if value is None:
        return None
    if spec.nargs == "?" and value is True:
        return True
    if spec.takes_list:
        items = value if isinstance(value, list) else [value]
        if spec.nargs == "+" and not items:
            raise _ValueError("takes at least one value")
        if isinstance(spec.nargs, int) and len(items) != spec.nargs:
            raise _ValueError(f"takes exactly {spec.nargs} values, got {len(items)}")
        out = [_scalar(spec, v) for v in items]
        for v in out:
            if isinstance(v, str) and v.startswith("-") and not _NEG_NUMBER.match(v):
                raise _ValueError(f"list value {v!r} starts with '-' and would be read as an option")
        return out
    return _scalar(spec, value)


# ------------------------------------------------------------------------------------------------ API
def canonicalize(flags: Mapping[str, FlagValue | CanonValue], schema: FlagSchema, *,
                 reserved: Mapping[str, str] = RESERVED_DESTS) -> FlagSet:
    """Resolve names like argparse (exact, else unique prefix), type and check values; one error for all problems."""
    problems: list[FlagProblem] = []
    values: dict[str, CanonValue] = {}
    seen: dict[str, str] = {}  # dest → written
    renamed: dict[str, str] = {}
    notes: list[str] = []
    value_trouble = False
    for written in sorted(flags):
        spec, option, problem = _resolve(schema, written)
        if problem is not None:
            problems.append(problem)
            continue
        assert spec is not None and option is not None
        shown = "--" + written.lstrip("-")
        if spec.dest in reserved:
            problems.append(FlagProblem(shown, f"is set from the profile field {reserved[spec.dest]}, not from flags"))
            continue
        if spec.dest in seen:
            problems.append(FlagProblem(shown, f"sets the same option as --{seen[spec.dest]} (both are "
                                               f"--{spec.canonical}); keep one"))
            continue
        seen[spec.dest] = written.lstrip("-")
        raw: Any = flags[written]
        if spec.kind == "bool_optional" and option == spec.negative_option:
            try:
                raw = not _to_bool(raw)
            except _ValueError as exc:
                problems.append(FlagProblem(shown, str(exc), kind="value"))
                continue
        if raw in (REDACTED, SECRET_REF):  # evidence read back as configuration would run with the placeholder
            problems.append(FlagProblem(shown, f"the value {raw} stands for a withheld secret, not a value"))
            continue
        unfit = flag_value_problem(raw) if isinstance(raw, str | list) else None
        if unfit:  # before conversion, so no message quotes a huge or broken value
            problems.append(FlagProblem(shown, unfit))
            value_trouble = True
            continue
        try:
            value = _convert(spec, raw)
        except _ValueError as exc:
            typed = f" (type {spec.type} in sglang {schema.version}'s flag schema)" if spec.type else ""
            problems.append(FlagProblem(shown, f"{exc}{typed}", kind="value"))
            continue
        if written.lstrip("-") != spec.canonical:
            renamed[written.lstrip("-")] = spec.canonical
        unfit = flag_value_problem(value)
        if unfit:
            problems.append(FlagProblem(shown, unfit))
            value_trouble = True
            continue
        if spec.deprecated:
            notes.append(f"--{spec.canonical} is deprecated in sglang {schema.version}: {spec.help[:120]}")
        if value is not None:
            values[spec.canonical] = value
    if problems:
        raise flag_error(problems, schema, values=value_trouble)
    return _within_limits(FlagSet(schema=schema, values=dict(sorted(values.items())), renamed=renamed,
                                  notes=tuple(notes)))


def _within_limits(flags: FlagSet) -> FlagSet:
    """The whole rendered flag command line must stay under the limit (each value was checked on its own)."""
    problem = command_line_problem(flags.argv())
    if problem:
        raise flag_error([FlagProblem("(all flags)", problem)], flags.schema, values=True)
    return flags


_RENAME_FIX = "rename or remove the flags named above (the installed sglang's parser is the authority)"
_FIXES = {"syntax": "write each --set as KEY=VALUE (e.g. --set max-running-requests=2048)",
          "value": "give each flag named above a value of the type or choice it names",
          "name": _RENAME_FIX}


def flag_error(problems: Sequence[FlagProblem], schema: FlagSchema, *, values: bool = False) -> ConfigError:
    """One error for every problem; `values` when some are values over the limits or with refused characters."""
    n = len(problems)
    head = f"{n} flag problem{'s' if n > 1 else ''} for sglang {schema.version}"
    what = f"{head}: {problems[0].text()}" if n == 1 else head + "".join(f"\n  - {p.text()}" for p in problems)
    kinds = {p.kind for p in problems}
    return ConfigError(
        what,
        fix=(f"{VALUE_FIX}; for a flag name, {_RENAME_FIX}" if values
             else "; ".join(fix for kind, fix in _FIXES.items() if kind in kinds)),
        details={"sglang_version": schema.version,
                 "problems": [{"flag": p.flag, "error": p.error, "suggestion": p.suggestion} for p in problems]},
    )


# ------------------------------------------------------------------------------------------------ secrets
def secret_names(flags: FlagSet, marked: Iterable[str] = ()) -> frozenset[str]:
    """The secret flags of `flags` (canonical names): those the schema marks (FlagSpec.secret) and those a profile
    marks (`secret_flags`). Their values are registered with the redactor. A secret must be a text option."""
    extra: set[str] = set()
    for written in marked:
        spec, _, problem = _resolve(flags.schema, written)
        if problem is not None or spec is None:
            raise ConfigError(f"secret_flags: {problem.text() if problem else written}",
                              fix=f"name flags of sglang {flags.version}, without leading dashes")
        if spec.kind != "value" or spec.type not in (None, "str") or spec.takes_list:
            raise ConfigError(f"secret_flags: --{spec.canonical} does not take one text value; only text flags can "
                              "be kept secret", fix=f"remove {written} from secret_flags")
        extra.add(spec.canonical)
    names = frozenset(n for n in flags.values if n in extra or _spec(flags, n).secret)
    for name in names:
        register_secret(str(flags.values[name]))
    return names


def _spec(flags: FlagSet, name: str) -> FlagSpec:
    spec = flags.schema.by_option("--" + name)
    assert spec is not None, name
    return spec


def stored_flags(flags: FlagSet, secrets: Iterable[str]) -> dict[str, CanonValue]:
    """The flags as evidence stores them (flags.json): each secret's value replaced by SECRET_REF."""
    hidden = set(secrets)
    return {k: (SECRET_REF if k in hidden else v) for k, v in flags.as_dict().items()}


def masked_diff(diff: Iterable[tuple[str, Any, Any]], secrets: Iterable[str]) -> list[tuple[str, Any, Any]]:
    """A flag diff fit for output, meta.json and history: a secret's values shown as SECRET_REF (or None)."""
    hidden = set(secrets)
    def shown(name: str, value: Any) -> Any:
        return SECRET_REF if name in hidden and value is not None else value

    return [(k, shown(k, a), shown(k, b)) for k, a, b in diff]


def with_secret_values(stored: Mapping[str, Any], values: Mapping[str, Any], where: str, *,
                       given: Iterable[str] = ()) -> dict[str, Any]:
    """Stored flags (flags.json) with every SECRET_REF replaced by the value from its real source (`values`, the
    release's secrets.yaml). A value stored redacted, or a reference without a value, is an error, never a flag;
    unless the caller gives that flag anew (`given`, canonical names): then it is left out here."""
    out = dict(stored)
    renewed = set(given)
    for name, value in stored.items():
        if value in (SECRET_REF, REDACTED) and name in renewed and not values.get(name):
            del out[name]
        elif value == SECRET_REF:
            real = values.get(name)
            if not isinstance(real, str) or not real:
                raise ConfigError(f"the secret flag --{name} of {where} has no value in its secrets.yaml",
                                  fix=f"give it again: --set {name}=VALUE (or --unset {name})")
            register_secret(real)
            out[name] = real
        elif value == REDACTED:
            raise ConfigError(f"flag --{name} of {where} was stored redacted (by an older deploy): its value is "
                              "not on the target", fix=f"give it again: --set {name}=VALUE (or --unset {name})")
    return out


def diff_flags(old: FlagSet | Mapping[str, Any], new: FlagSet | Mapping[str, Any]
               ) -> list[tuple[str, Any, Any]]:
    """(flag, old value or None, new value or None) for each canonical name that differs, sorted by name."""
    a = old.values if isinstance(old, FlagSet) else old
    b = new.values if isinstance(new, FlagSet) else new
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def refuse_secret_dimension(option: str, name: str, schema: FlagSchema | None = None,
                            marked: Iterable[str] = ()) -> None:
    """The one rule for secrets in searches and sweeps (`tune --over`, `bench --sweep-server`, and the bench
    parameters of `bench --set/--sweep`): a secret is never a dimension. A point's or sweep value's text is its
    label, and labels are drawn in plots, written into report pages, tune records and ledger rows, so a secret
    there would leak through every one of them. Refused (exit 2) before anything runs. A flag is secret when the
    schema marks it, the profile lists it in `secret_flags`, or its name names a secret (`admin-api-key`)."""
    bare = name.strip().lstrip("-")
    spec = None
    if schema is not None:
        try:
            spec = schema.resolve(bare).spec
        except ResolveError:
            spec = None  # the option's own parser reports an unknown name
    names = {bare, bare.replace("-", "_")} | ({spec.canonical, spec.dest} if spec is not None else set())
    listed = {m.strip().lstrip("-").replace("_", "-") for m in marked}
    if ((spec is not None and spec.secret) or any(is_secret_key(n) for n in names)
            or any(n.replace("_", "-") in listed for n in names)):
        shown = spec.canonical if spec is not None else bare
        # Worded so that redaction leaves it whole: no `--NAME VALUE` or `NAME=VALUE` shape (redact.py would
        # take the next word for the secret and print "--admin-api-key <redacted> a secret").
        raise ConfigError(f"{option}: {shown!r} is a secret flag, and a search or sweep value is a label that is "
                          "drawn in plots and written into reports, records and the ledger",
                          fix=f"put {shown!r} in the profile's flags and list it in its secret_flags, then roll "
                              "it on its own (`deploy roll host NAME --profile P`): its value then lives only in "
                              "the release's 0600 secrets.yaml")


def parse_set(items: Iterable[str], schema: FlagSchema) -> dict[str, FlagValue]:
    """`--set KEY=VALUE` strings → {KEY: typed value}; KEY with or without dashes; `KEY` alone is a switch on.

    Values are typed by the schema: int/float, true/false for switches, comma-separated items for list flags,
    otherwise the text as given (JSON included). Names are resolved later by `canonicalize`/`apply_changes`, so
    aliases and abbreviations keep their normal errors and hints.
    """
    out: dict[str, FlagValue] = {}
    problems: list[FlagProblem] = []
    given: dict[str, str] = {}  # dest → the --set item that set it
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not key:
            problems.append(FlagProblem(item, "expected KEY=VALUE", kind="syntax"))
            continue
        spec, _, problem = _resolve(schema, key)
        if problem is not None:
            problems.append(problem)
            continue
        assert spec is not None
        if spec.dest in given:
            problems.append(FlagProblem("--" + key.lstrip("-"), f"is given twice in --set (as {given[spec.dest]!r} and "
                                        f"then {key!r}; both are --{spec.canonical}); give each flag once"))
            continue
        given[spec.dest] = key
        if not sep:
            if spec.kind in ("switch", "bool_optional") or spec.nargs == "?":
                out[key.lstrip("-")] = True
                continue
            problems.append(FlagProblem("--" + key.lstrip("-"), f"needs a value: write {key.lstrip('-')}=VALUE",
                                        kind="syntax"))
            continue
        value: FlagValue
        if spec.kind in ("switch", "bool_optional"):
            try:
                value = _to_bool(text)
            except _ValueError as exc:
                problems.append(FlagProblem("--" + key.lstrip("-"), str(exc), kind="value"))
                continue
        elif spec.takes_list:
            value = [_typed_text(spec, t.strip()) for t in text.split(",") if t.strip()]
        else:
            value = _typed_text(spec, text)
        out[key.lstrip("-")] = value
    if problems:
        raise flag_error(problems, schema)
    return out


def _typed_text(spec: FlagSpec, text: str) -> str | int | float:
    if spec.type == "int":
        try:
            return int(text)
        except ValueError:
            return text  # _scalar reports it with the flag's name
    if spec.type == "float":
        try:
            return float(text)
        except ValueError:
            return text
    return text


def apply_changes(base: FlagSet, set_: Mapping[str, FlagValue], unset: Sequence[str] = ()) -> FlagSet:
    """base + changes, canonical. Setting a switch to false or unsetting a flag removes it."""
    schema = base.schema
    changes = canonicalize({k: v for k, v in set_.items() if v is not False}, schema)
    turned_off = canonicalize({k: True for k, v in set_.items() if v is False}, schema) if any(
        v is False for v in set_.values()) else None
    problems: list[FlagProblem] = []
    removed: set[str] = set()
    for name in unset:
        spec, _, problem = _resolve(schema, name)
        if problem is not None:
            problems.append(problem)
            continue
        assert spec is not None
        if spec.canonical in changes.values:
            problems.append(FlagProblem("--" + spec.canonical, "is both set and unset"))
        elif spec.canonical not in base.values:
            problems.append(FlagProblem("--" + spec.canonical, "is not in the current flag set, nothing to unset"))
        removed.add(spec.canonical)
    if problems:
        raise flag_error(problems, schema)
    merged: dict[str, CanonValue] = {k: v for k, v in base.values.items() if k not in removed}
    if turned_off is not None:
        for name in turned_off.values:
            spec = schema.by_option("--" + name)
            if spec is not None and spec.kind == "bool_optional":
                merged[name] = False
            else:
                merged.pop(name, None)
    merged.update(changes.values)
    return _within_limits(FlagSet(schema=schema, values=dict(sorted(merged.items())),
                                  renamed={**base.renamed, **changes.renamed}, notes=base.notes + changes.notes))
