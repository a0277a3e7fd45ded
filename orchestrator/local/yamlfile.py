"""The one way the tool reads YAML: safe types only, and a key written twice in one mapping is an error.

PyYAML's own loaders keep the last of two equal keys without a word, so `vmid: 120` followed by `vmid: 121` in
one container block created CT 121, and a second host entry with the same name silently redirected the
connection. Every YAML file the tool reads (inventory, playbooks, `roll --flags FILE`) goes through `load_yaml`,
which refuses such a file naming the file, both lines and the key.

A document decoded once is kept by its content (orchestrator/yamlcache.py), so PyYAML itself loads only
when a text is new: the loader classes below are made on first use.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError
from orchestrator.local import yamlcache as yaml_cache
from orchestrator.local.files import read_text_file

if TYPE_CHECKING:
    from yaml.nodes import Node

_MERGE_TAG = "tag:yaml.org,2002:merge"
#: Nodes a document may hold once every alias is expanded. A real inventory or flag file has hundreds; an alias
#: bomb ("billion laughs": nine anchors of nine aliases each) has hundreds of millions, and every later walk over
#: the loaded data (a size check, a JSON dump) would expand them, for minutes and gigabytes.
MAX_EXPANDED_NODES = 100_000


class DuplicateKeyError(Exception):
    """Two equal keys in one mapping; lines are 1-based."""

    def __init__(self, key: str, first_line: int, line: int) -> None:
        self.key = key
        self.first_line = first_line
        self.line = line
        super().__init__(f"key {key!r} on line {line} repeats line {first_line}")


class AliasBombError(Exception):
    """The document expands to more than MAX_EXPANDED_NODES nodes through its aliases."""


def expanded_nodes(root: Node) -> int:
    """How many nodes `root` stands for with every alias expanded, counted without expanding (each distinct node
    once, memoised; iterative, so deep nesting cannot exhaust the stack). Stops counting past the limit."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        kids: list[Node] = []
        if isinstance(node.value, list):
            for item in node.value:
                kids.extend(item if isinstance(item, tuple) else (item,))
        if children_done:
            sizes[id(node)] = min(1 + sum(sizes.get(id(k), 0) for k in kids), MAX_EXPANDED_NODES + 1)
        else:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]


def base_loader() -> Any:
    """libyaml's safe loader where PyYAML has it, else the pure-Python one."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def unique_key_loader() -> Any:
    """SafeLoader that refuses a mapping holding the same key twice (merge keys `<<:` may still be overridden)
    and a document whose aliases expand past MAX_EXPANDED_NODES nodes, before constructing anything."""
    from yaml.nodes import MappingNode

    class UniqueKeyLoader(base_loader()):  # type: ignore[misc]
        def get_single_data(self) -> Any:
            node = self.get_single_node()
            if node is None:
                return None
            size = expanded_nodes(node)
            if size > MAX_EXPANDED_NODES:
                raise AliasBombError(f"its aliases expand to more than {MAX_EXPANDED_NODES:,} nodes")
            return self.construct_document(node)

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

    return UniqueKeyLoader


def parse_yaml(text: str, source: str) -> Any:
    """Decode YAML text; `source` (a path or a description) opens every error message. A text decoded before
    comes from the cache of decoded documents (orchestrator/yamlcache.py)."""
    cached = yaml_cache.lookup(text)
    if not yaml_cache.is_missing(cached):
        return cached
    data = decode_yaml(text, source)
    yaml_cache.store(text, data)
    return data


def decode_yaml(text: str, source: str) -> Any:
    """parse_yaml without the cache: PyYAML with the checks above."""
    import yaml

    try:
        return yaml.load(text, Loader=unique_key_loader())  # a SafeLoader subclass: safe types only
    except DuplicateKeyError as exc:
        raise ConfigError(f"{source}: line {exc.line}: key {exc.key!r} is given twice (first on line "
                          f"{exc.first_line}); YAML would silently keep only the last one",
                          fix=f"keep one {exc.key!r} in that block and delete the other",
                          details={"file": source, "line": exc.line, "first_line": exc.first_line,
                                   "key": exc.key}) from None
    except AliasBombError as exc:
        raise ConfigError(f"{source}: refused: {exc} (a YAML alias bomb?)",
                          fix="write the values out instead of repeating anchors (`*name`) inside anchors") from None
    except yaml.YAMLError as exc:
        where = str(exc).replace('"<unicode string>"', source)
        raise ConfigError(f"{source}: not valid YAML: {where}", fix="fix the YAML syntax at the line named") from None


def load_yaml(path: Path) -> Any:
    """Read and decode one YAML file (see `parse_yaml`); an unreadable file is a ConfigError too."""
    return parse_yaml(read_text_file(path, "YAML file"), str(path))


def key_line(path: Path, *keys: str) -> int | None:
    """1-based line of the mapping key reached by `keys` from the top of a YAML file; when the path ends early
    (a missing key), the line of the deepest key that is there; None when not even the first one is."""
    import yaml
    from yaml.nodes import MappingNode

    try:
        node: Node | None = yaml.compose(path.read_text(encoding="utf-8"), Loader=base_loader())
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
