"""The one way the tool reads YAML: safe types only, and a key written twice in one mapping is an error.

PyYAML's own loaders keep the last of two equal keys without a word, so `vmid: 120` followed by `vmid: 121` in
one container block created CT 121, and a second host entry with the same name silently redirected the
connection. Every YAML file the tool reads (inventory, playbooks, `roll --flags FILE`) goes through `load_yaml`,
which refuses such a file naming the file, both lines and the key.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node

from orchestrator.errors import ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """Two equal keys in one mapping; lines are 1-based."""

    def __init__(self, key: str, first_line: int, line: int) -> None:
        self.key = key
        self.first_line = first_line
        self.line = line
        super().__init__(None, None, f"key {key!r} on line {line} repeats line {first_line}")


class UniqueKeyLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that refuses a mapping holding the same key twice (merge keys `<<:` may still be overridden)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable key: the base constructor reports it
            line = key_node.start_mark.line + 1
            if first is not None:
                shown = key_node.value if isinstance(key_node.value, str) else repr(key)
                raise DuplicateKeyError(shown, first, line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """Decode YAML text; `source` (a path or a description) opens every error message."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass: safe types only
    except DuplicateKeyError as exc:
        raise ConfigError(f"{source}: line {exc.line}: key {exc.key!r} is given twice (first on line "
                          f"{exc.first_line}); YAML would silently keep only the last one",
                          fix=f"keep one {exc.key!r} in that block and delete the other",
                          details={"file": source, "line": exc.line, "first_line": exc.first_line,
                                   "key": exc.key}) from None
    except yaml.YAMLError as exc:
        where = str(exc).replace('"<unicode string>"', source)
        raise ConfigError(f"{source}: not valid YAML: {where}", fix="fix the YAML syntax at the line named") from None


def load_yaml(path: Path) -> Any:
    """Read and decode one YAML file (see `parse_yaml`); an unreadable file is a ConfigError too."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})", fix="save the file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}", fix="check the path and its permissions") from None
    return parse_yaml(text, str(path))


def key_line(path: Path, *keys: str) -> int | None:
    """1-based line of the mapping key reached by `keys` from the top of a YAML file; when the path ends early
    (a missing key), the line of the deepest key that is there; None when not even the first one is."""
    try:
        node: Node | None = yaml.compose(path.read_text(encoding="utf-8"), Loader=_BaseLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line: int | None = None
    for key in keys:
        if not isinstance(node, MappingNode):
            return line
        for k, v in node.value:
            if getattr(k, "value", None) == key:
                node, line = v, k.start_mark.line + 1
                break
        else:
            return line
    return line
