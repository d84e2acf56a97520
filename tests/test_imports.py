"""The package's modules import each other without a cycle, lazily or not.

An import inside a function is still an arrow between two modules: written to dodge a
cycle, it hides one. The graph below has an edge for every ``import shard_tutorial...``
and ``from shard_tutorial... import`` anywhere in a module (its top level, its functions,
its ``TYPE_CHECKING`` blocks), and must have no cycle. Only the packages' front doors
(``__init__``, ``__main__``) may import what imports them back: a package's
``__init__`` re-exports its modules' names, and every module imports its package first.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import shard_tutorial

ROOT = Path(shard_tutorial.__file__).parent
PACKAGE = "shard_tutorial"
FRONT_DOORS = ("__init__", "__main__")


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def imported(path: Path) -> Iterator[tuple[str, int]]:
    """Each module of the package ``path`` imports, anywhere in it, with the line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from its package up
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            # `from shard_tutorial import launcher` imports a module; `import check` a name.
            names = [f"{source}.{alias.name}" for alias in node.names]
            names = [n if n in MODULES else source for n in names]
        else:
            continue
        for name in names:
            module = name
            while module and module not in MODULES:  # `import a.b.c` of a name inside a.b
                module = module.rpartition(".")[0]
            if module.startswith(PACKAGE) and module != here:
                yield module, node.lineno


def is_front_door(module: str) -> bool:
    return MODULES[module].stem in FRONT_DOORS


def graph() -> dict[str, dict[str, int]]:
    """Module -> the modules it imports, with a line of each; a front door imports none."""
    edges: dict[str, dict[str, int]] = {}
    for module, path in MODULES.items():
        found = edges.setdefault(module, {})
        if not is_front_door(module):
            for target, line in imported(path):
                found.setdefault(target, line)
    return edges


def find_cycle(edges: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of ``edges`` (its modules, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(edges.get(module, {})):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_walk_sees_lazy_and_type_checking_imports():
    edges = graph()
    # At the top level, inside a function (explain's recorder, loaded on use), and
    # inside a function of a module started as a process (the worker's): all arrows.
    assert "shard_tutorial.compiled" in edges["shard_tutorial.collective_costs"]
    assert "shard_tutorial.checking.recording" in edges["shard_tutorial.explain"]
    assert "shard_tutorial.processes" in edges["shard_tutorial.checking.worker"]


def test_no_module_imports_itself_back():
    edges = graph()
    cycle = find_cycle(edges)
    if cycle is not None:
        where = [
            f"{a} -> {b} ({MODULES[a].relative_to(ROOT.parent)}:{edges[a][b]})"
            for a, b in itertools.pairwise(cycle)
        ]
        pytest.fail("an import cycle:\n" + "\n".join(where))


def test_a_cycle_would_be_found():
    edges = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None
