"""Issue 47's figures of the tree's shape, for orchestrator/ and simulator/: run on any checkout (read-only).

    python tests/perf/house_figures.py [REPO]     # REPO defaults to this checkout

How each figure is counted (all from the source with `ast`, nothing imported):
- top-level modules: `PKG/*.py` but `__init__.py` and `__main__.py`.
- floors: the package import graph (a node per top-level package or top-level module, as
  tests/unit/test_package_cycles.py draws it; every import, function-level included), its strongly connected
  components condensed; the number of nodes on its longest path.
- file circles: the module import graph (a node per file; `from a import b` is an edge to the module `a.b` when
  that is a file, else to `a`; function-level imports count, imports under `if TYPE_CHECKING:` do not); its
  strongly connected components of more than one file, each listed.
- `.stdout` reads: attribute loads `x.stdout` (not stores, not `sys.stdout`), in files outside `facts/` and
  `remote/`.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

Graph = dict[str, set[str]]


def _modules(root: Path, pkg: str) -> dict[str, Path]:
    out = {}
    for p in (root / pkg).rglob("*.py"):
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            for b in n.body:
                skip.update(id(x) for x in ast.walk(b))
    return skip


def _imports(path: Path, module: str, is_pkg: bool) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    out: list[tuple[str, list[str]]] = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.Import):
            out.extend((a.name, []) for a in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (n.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            out.append((base, [a.name for a in n.names]))
    return out


def file_graph(root: Path, pkg: str) -> Graph:
    mods = _modules(root, pkg)
    g: Graph = defaultdict(set)
    for mod, path in mods.items():
        g[mod]
        for base, names in _imports(path, mod, path.name == "__init__.py"):
            if not base.startswith(pkg):
                continue
            targets = [f"{base}.{n}" for n in names if f"{base}.{n}" in mods]
            if len(targets) < len(names) or not names:
                targets.append(base)
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    g[mod].add(t)
    return g


def package_graph(root: Path, pkg: str) -> Graph:
    def node(m: str) -> str:
        parts = m.split(".")
        if len(parts) == 1:
            return pkg
        return parts[1] if (root / pkg / parts[1]).is_dir() else ".".join(parts[:2])

    g: Graph = defaultdict(set)
    for src, dsts in file_graph(root, pkg).items():
        a = node(src)
        g[a]
        for d in dsts:
            b = node(d)
            if b != a and b != pkg:
                g[a].add(b)
    return g


def sccs(g: Graph) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def floors(g: Graph) -> int:
    comp_of = {v: i for i, c in enumerate(sccs(g)) for v in c}
    cg: dict[int, set[int]] = defaultdict(set)
    for v, ws in g.items():
        for w in ws:
            if comp_of[v] != comp_of[w]:
                cg[comp_of[v]].add(comp_of[w])
    memo: dict[int, int] = {}

    def depth(c: int) -> int:
        if c not in memo:
            memo[c] = 1 + max((depth(d) for d in cg.get(c, ())), default=0)
        return memo[c]

    return max((depth(c) for c in set(comp_of.values())), default=0)


def stdout_reads(root: Path, pkg: str) -> int:
    n = 0
    for p in (root / pkg).rglob("*.py"):
        rel = p.relative_to(root / pkg).parts
        if rel[0] in ("facts", "remote"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "stdout" and isinstance(node.ctx, ast.Load)
                    and not (isinstance(node.value, ast.Name) and node.value.id == "sys")):
                n += 1
    return n


def figures(root: Path, pkg: str) -> tuple[int, int, list[list[str]], int]:
    top = [p for p in (root / pkg).glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    circles = [c for c in sccs(file_graph(root, pkg)) if len(c) > 1]
    return len(top), floors(package_graph(root, pkg)), circles, stdout_reads(root, pkg)


def main() -> None:
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    print(f"tree: {root}")
    for pkg in ("orchestrator", "simulator"):
        top, fl, circles, reads = figures(root, pkg)
        print(f"{pkg}: top-level modules {top}, floors {fl}, file circles {len(circles)}, "
              f".stdout reads outside facts/ and remote/ {reads}")
        for c in circles:
            print(f"  circle: {' ↔ '.join(c)}")


if __name__ == "__main__":
    main()
