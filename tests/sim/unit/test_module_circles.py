"""No module of `simulator/` imports, even lazily, one that imports it back (issue 47): a file circle is two modules
that can only change together, and pve/ ↔ lxc/ was one. Lazy imports count: they are an edge all the same."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_package_cycles import cycles

ROOT = Path(__file__).resolve().parents[3]


def module_graph(package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (`from a.b import c` counts a.b and a.b.c, whichever exists)."""
    mods: dict[str, Path] = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                top = here[: len(here) - node.level + 1] if node.level else []
                base = ".".join([*top, node.module or ""])
                names = [base.rstrip("."), *(f"{base.rstrip('.')}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            edges[mod].update(n for n in names if n in mods and n != mod)
    return edges


def test_the_graph_sees_a_lazy_import() -> None:
    assert "simulator.pve.cli" in module_graph("simulator")["simulator.pve.pct"]  # imported inside main()


def test_no_module_of_the_simulator_imports_back_into_one_that_imports_it() -> None:
    assert cycles(module_graph("simulator")) == []


def package_graph(package: str) -> dict[str, set[str]]:
    """The module graph folded to the package's folders (pve, lxc, host …) and top-level modules."""
    folded: dict[str, set[str]] = {}
    for mod, deps in module_graph(package).items():
        src = ".".join(mod.split(".")[:2])
        folded.setdefault(src, set()).update(d for d in (".".join(t.split(".")[:2]) for t in deps) if d != src)
    return folded


def test_no_folder_of_the_simulator_imports_back_into_one_that_imports_it() -> None:
    """pve/ runs its containers on lxc/; lxc/ reads their config through the top-level ctconf.py, never pve/."""
    assert cycles(package_graph("simulator")) == []
