"""Read every YAML file of an inventory directory (or a ':'-separated list of them) into one Inventory.

Every error names the file and, where the key is in it, the line: a key written twice in one mapping, a name
defined in two files, a reference to a profile or preset that does not exist, two spellings of one sglang flag.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.errors import ConfigError, did_you_mean
from orchestrator.flags.limits import VALUE_FIX, UnitTextError
from orchestrator.flags.schema import FlagSchema, ResolveError
from orchestrator.inventory.models import PROFILE_NAME, Inventory, ServerProfile
from orchestrator.local.files import read_text_file
from orchestrator.local.yamlfile import key_line, load_yaml
from orchestrator.stacks.lock import lock_constraints, parse_lock
from orchestrator.stacks.patches import parse_patch

SECTIONS = ("hosts", "profiles", "presets", "groups")
#: Sections that are one mapping (not name → entry), defined in at most one file.
SINGLE_SECTIONS = ("router", "notify", "health", "state_url", "state_password_file")


def _key_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _at(path: Path, *keys: str) -> str:
    """`FILE: line N` for the deepest of `keys` found in the file, else just `FILE`."""
    line = key_line(path, *keys)
    return f"{path}: line {line}" if line else str(path)


def _read_yaml(path: Path) -> dict[str, Any]:
    data = load_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping with keys {', '.join(SECTIONS)}")
    unknown = sorted(map(str, set(data) - set(SECTIONS) - set(SINGLE_SECTIONS)))
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(unknown)}",
                          fix=f"use only {', '.join((*SECTIONS, *SINGLE_SECTIONS))}")
    return data


def _dir_list(dirs: str | Path | list[Path]) -> list[Path]:
    if isinstance(dirs, str):
        return [Path(p) for p in dirs.split(":") if p]
    if isinstance(dirs, Path):
        return [dirs]
    return dirs


def inventory_files(directory: Path) -> list[Path]:
    """The files of one inventory directory that `load_inventory` reads, in its order (none if it is missing)."""
    if not directory.is_dir():
        return []
    return sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])


def load_inventory(dirs: str | Path | list[Path]) -> Inventory:
    """Merge all *.yaml / *.yml files; a name defined twice is an error naming both files and lines."""
    dir_list = _dir_list(dirs)
    merged: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    origin: dict[tuple[str, str], Path] = {}
    seen_files: set[Path] = set()
    single: dict[str, Any] = {}
    for d in dir_list:
        if not d.is_dir():
            raise ConfigError(f"inventory directory {d} does not exist",
                              fix="pass --inventory DIR or set $DEPLOY_INVENTORY")
        for path in inventory_files(d):
            if path.resolve() in seen_files:
                continue  # the same directory named twice is not a second definition
            seen_files.add(path.resolve())
            data = _read_yaml(path)
            for section in SECTIONS:
                entries = data.get(section) or {}
                if not isinstance(entries, dict):
                    raise ConfigError(f"{path}: '{section}' must be a mapping of name → entry")
                for name, body in entries.items():
                    name = str(name)
                    if (section, name) in origin:
                        first = origin[(section, name)]
                        raise ConfigError(f"{_at(path, section, name)}: {section}.{name} is already defined in "
                                          f"{_at(first, section, name)}",
                                          fix=f"keep one definition of {section}.{name} (rename or delete the other)")
                    origin[(section, name)] = path
                    if section == "hosts" and isinstance(body, dict):
                        body = {"name": name, **body}
                    merged[section][name] = body
            for section in SINGLE_SECTIONS:
                if data.get(section) is None:
                    continue
                if section in single:
                    raise ConfigError(f"{_at(path, section)}: '{section}' is already defined in "
                                      f"{_at(origin[(section, '')], section)}", fix="keep one definition")
                single[section] = data[section]
                origin[(section, "")] = path
    _check_references(merged, origin)
    try:
        inventory = Inventory.model_validate({**merged, **single})
    except ValidationError as exc:
        raise _validation_error(exc, origin, dir_list) from None
    _check_flag_spellings(inventory, origin)
    return with_patches(with_locks(inventory, dir_list, origin), origin)


#: Where a profile's lock lives, relative to an inventory directory (`deploy lock` writes it).
LOCKS_DIR = "locks"


def lock_path(inventory_dir: Path, profile: str) -> Path:
    if not PROFILE_NAME.fullmatch(profile):  # the inventory refuses such a name; never a path out of locks/
        raise ConfigError(f"profile name {profile!r} is not a file name",
                          fix="rename the profile (letters, digits, . _ -)")
    return inventory_dir / LOCKS_DIR / f"{profile}.txt"


def with_locks(inventory: Inventory, dir_list: list[Path], origin: Mapping[tuple[str, str], Path]) -> Inventory:
    """Each profile with a `locks/<name>.txt` in one of the inventory directories gets it as its lock, checked
    here (before any remote change): its lines, and that it pins the profile's sglang_version."""
    profiles = dict(inventory.profiles)
    for name, profile in inventory.profiles.items():
        if profile.lock_file is not None or profile.lock_text is not None:
            raise ConfigError(f"{_at(origin[('profiles', name)], 'profiles', name)}: lock_file/lock_text are "
                              "not inventory keys", fix=f"the lock is {LOCKS_DIR}/{name}.txt, written by `deploy lock`")
        path = next((lock_path(d, name) for d in dir_list if lock_path(d, name).exists()), None)
        if path is None:
            continue
        text = read_text_file(path, "lock file")
        lock = parse_lock(text, str(path))
        pinned = lock.version_of("sglang")
        if pinned != profile.sglang_version:
            raise ConfigError(f"{path} locks sglang {pinned or '(none)'}, but profile {name} pins "
                              f"sglang_version {profile.sglang_version}",
                              fix=f"run `deploy lock {name} --host HOST` again after changing the pin (and review "
                                  "the diff), or remove the stale lock file")
        recorded = lock_constraints(text)
        if sorted(recorded or ()) != sorted(profile.constraints) and (recorded is not None or profile.constraints):
            said = ", ".join(recorded) if recorded else ("no constraints" if recorded is not None else
                                                         "no constraints line (written before constraints)")
            raise ConfigError(f"{path} was resolved with {said}, but profile {name} has constraints "
                              f"{', '.join(profile.constraints) or '(none)'}",
                              fix=f"run `deploy lock {name} --host HOST` again after changing `constraints:` (and "
                                  "review the diff), or remove the stale lock file")
        profiles[name] = profile.model_copy(update={"lock_file": str(path), "lock_text": text})
    return inventory.model_copy(update={"profiles": profiles})


def with_patches(inventory: Inventory, origin: Mapping[tuple[str, str], Path]) -> Inventory:
    """Each profile's `patches:` read from the inventory directory of the file that defines the profile and parsed
    here (before any remote change): a missing, unreadable or malformed patch is a ConfigError naming it."""
    profiles = dict(inventory.profiles)
    for name, profile in inventory.profiles.items():
        def where(name: str = name) -> str:  # the file and line, looked up (with PyYAML) only for an error
            return _at(origin[("profiles", name)], "profiles", name, "patches")

        if profile.patch_texts:
            raise ConfigError(f"{where()}: patch_texts is not an inventory key",
                              fix="list the patch files under `patches:`; the loader reads them")
        if not profile.patches:
            continue
        base = origin[("profiles", name)].parent
        texts: dict[str, str] = {}
        for entry in profile.patches:
            if Path(entry).is_absolute():
                raise ConfigError(f"{where()}: patch {entry} is an absolute path",
                                  fix="keep patch files with the inventory (e.g. patches/NAME.patch) and name them "
                                      "relative to its directory")
            if entry in texts:
                raise ConfigError(f"{where()}: patch {entry} is listed twice", fix="list each patch file once")
            path = base / entry
            if not path.exists():
                raise ConfigError(f"{where()}: patch file {path} does not exist",
                                  fix=f"put the patch at {path} (patch paths are relative to {base})")
            text = read_text_file(path, "patch file")
            parse_patch(text, entry)  # refused here, not on the host
            texts[entry] = text
        profiles[name] = profile.model_copy(update={"patch_texts": texts})
    return inventory.model_copy(update={"profiles": profiles})


def _validation_error(exc: ValidationError, origin: Mapping[tuple[str, str], Path],
                      dir_list: list[Path]) -> ConfigError:
    problems = []
    where = ""
    fix = "correct the inventory entry named above (docs/inventory.md lists every key)"
    for err in exc.errors()[:5]:
        loc = err["loc"]
        cause = (err.get("ctx") or {}).get("error")
        keys = [str(p) for p in loc]
        if isinstance(cause, UnitTextError):
            keys += [cause.key] if cause.key else []  # point at the flag's own line, not at `flags:`
            fix = VALUE_FIX
        file = (origin.get((str(loc[0]), str(loc[1]))) or origin.get((str(loc[0]), ""))) if len(loc) >= 2 else None
        if not where:
            where = f"{_at(file, *keys)}: " if file else f"{', '.join(str(d) for d in dir_list)}: "
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (not allowed here)"
            guess = did_you_mean(str(loc[-1]), _known_keys(loc))
            fix = ((f"did you mean {guess!r}? " if guess else "")
                   + "correct or remove the key: unknown keys are not allowed (docs/inventory.md lists every key)")
        problems.append(f"{_key_path(loc)}: {msg}" if loc else msg)
    more = f" (and {len(exc.errors()) - 5} more)" if len(exc.errors()) > 5 else ""
    return ConfigError(f"{where}{'; '.join(problems)}{more}", fix=fix)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: `Host`, `dict[str, Host]`, `PveApi | None`, …"""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _known_keys(loc: tuple[int | str, ...]) -> list[str]:
    """The keys allowed beside the last one of `loc` (an error's location in the inventory)."""
    models: list[type[BaseModel]] = [Inventory]
    for part in loc[:-1]:
        inner = [m for model in models if part in model.model_fields
                 for m in _models_in(model.model_fields[part].annotation)]
        models = inner or models  # not a field: a mapping's key or a list's index, same models inside
    return sorted({field.alias or name for model in models for name, field in model.model_fields.items()})


def _check_references(merged: Mapping[str, Mapping[str, Any]], origin: Mapping[tuple[str, str], Path]) -> None:
    """A host's `profile` and a profile's `bench_preset` must name an entry that exists."""
    preset_default = ServerProfile.model_fields["bench_preset"].default
    for section, field, target, default in (("hosts", "profile", "profiles", None),
                                            ("profiles", "bench_preset", "presets", preset_default)):
        known = sorted(merged[target])
        for name, body in merged[section].items():
            if not isinstance(body, dict):
                continue
            ref = body.get(field, default)
            if not isinstance(ref, str) or ref in merged[target]:
                continue  # a missing or mistyped field is the model's error
            where = _at(origin[(section, name)], section, name, field)
            close = did_you_mean(ref, known)
            guess = f"did you mean {close!r}? " if close else ""
            raise ConfigError(
                f"{where}: {section}.{name}.{field}: unknown {target[:-1]} {ref!r} "
                f"(known {target}: {', '.join(known) or 'none'})",
                fix=f"{guess}set {field}: to one of the known {target}, or define {ref!r} under {target}:",
                details={"known": known, "suggestion": close})


def _check_flag_spellings(inventory: Inventory, origin: Mapping[tuple[str, str], Path]) -> None:
    """Two keys of one profile's `flags:` that are one sglang option (`tp` and `tp-size`) would silently let one
    win; refuse them here, with the line, when the profile's sglang version has a packaged schema."""
    known_versions = FlagSchema.known_versions()
    for name, profile in inventory.profiles.items():
        if profile.sglang_version not in known_versions:
            continue
        schema = FlagSchema.load(profile.sglang_version)
        by_dest: dict[str, str] = {}
        for written in profile.flags:
            try:
                spec = schema.resolve(written).spec
            except ResolveError:
                continue  # unknown or ambiguous: canonicalize reports it with suggestions
            if spec.dest in by_dest:
                first = by_dest[spec.dest]
                where = _at(origin[("profiles", name)], "profiles", name, "flags", written)
                raise ConfigError(
                    f"{where}: profiles.{name}.flags: {first!r} and {written!r} are the same sglang "
                    f"{profile.sglang_version} flag --{spec.canonical}; only one of them would take effect",
                    fix=f"keep one of {first!r} and {written!r}")
            by_dest[spec.dest] = written
