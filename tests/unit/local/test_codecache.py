"""The dataclass code cache (orchestrator/codecache.py): the same classes with it, read only when private."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# A child process defines dataclasses of every kind the tool uses, with the cache installed, and prints what they
# do; `new` is how many texts it had to compile.
CHILD = r"""
import json, sys
from orchestrator.local import codecache
codecache.install()
from dataclasses import dataclass, field, replace, FrozenInstanceError

@dataclass(frozen=True)
class Point:
    x: int
    y: int = 7
    tags: tuple[str, ...] = ()

@dataclass(order=True)
class Box:
    name: str
    items: list[int] = field(default_factory=list)
    hidden: str = field(default="h", repr=False)

p = Point(1)
try:
    p.x = 3
    frozen = False
except FrozenInstanceError:
    frozen = True
b1, b2 = Box("a"), Box("b", [1])
b1.items.append(5)
out = {"repr": [repr(p), repr(b1)], "eq": p == Point(1, 7), "ne": p != Point(2), "hash": hash(p) == hash(Point(1)),
       "frozen": frozen, "order": b1 < b2, "factory_fresh": Box("c").items == [], "replace": repr(replace(p, y=9)),
       "new": codecache._new}
codecache.save()
print(json.dumps(out))
"""


def _child(state: Path) -> dict:
    env = {**os.environ, "DEPLOY_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def _cache_file(state: Path) -> Path:
    (found,) = (state / "cache").glob("dataclass-code-*.marshal")
    return found


def test_a_second_run_compiles_nothing_and_its_classes_behave_the_same(tmp_path: Path) -> None:
    first = _child(tmp_path)
    assert first["new"] > 5  # __init__, __repr__, __eq__, __hash__, __setattr__, order methods …
    path = _cache_file(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    second = _child(tmp_path)
    assert second.pop("new") == 0
    first.pop("new")
    assert second == first
    assert first["repr"] == ["Point(x=1, y=7, tags=())", "Box(name='a', items=[5])"]
    assert first["frozen"] and first["eq"] and first["ne"] and first["hash"] and first["order"]
    assert first["factory_fresh"] and first["replace"] == "Point(x=1, y=9, tags=())"


def test_a_cache_others_may_write_or_a_damaged_one_is_not_read(tmp_path: Path) -> None:
    _child(tmp_path)
    path = _cache_file(tmp_path)
    path.chmod(0o620)  # group-writable: somebody else could have put code there
    assert _child(tmp_path)["new"] > 5
    path.write_bytes(b"\x00not marshal")
    path.chmod(0o600)
    assert _child(tmp_path)["new"] > 5  # compiled as before, and the damaged file replaced
    assert _child(tmp_path)["new"] == 0
