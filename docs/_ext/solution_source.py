"""The code of a reference solution as a reader sees it: what ``reference-source`` renders.

Kept apart from the Sphinx directive, with no dependency but the standard library,
so that tests/test_pasted_solutions.py pastes exactly this code into a starter file
and runs the checker on it.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

Definition = ast.FunctionDef | ast.AsyncFunctionDef

PACKAGE = "shard_tutorial"


def solution_source(path: Path, function: str, exported: frozenset[str] | None = None) -> str:
    """The code a reader can copy: imports, ``function`` without its docstring, its helpers.

    The import lines are the module's own, cut down to the names the shown code
    uses (computed from the syntax tree), so the code runs when pasted into an
    empty file. Names the package exports at its top level are imported from it
    (``from shard_tutorial import data_mesh, place``), not from the module that
    defines them. ``from __future__`` imports are left out (they would have to come
    first in the reader's file, and the code does not need them).

    Args:
      path: the module file.
      function: a top-level function of that module.
      exported: the names ``shard_tutorial`` exports (its ``__all__``); read from
        the package's ``__init__.py`` next to ``path`` when not given.

    Returns:
      Python source: the import lines, then the function and the module's private
      functions it calls, directly or through one another, in source order.

    Raises:
      ValueError: if the module has no such function, or the code would import a
        private module (a dotted name with a part starting with ``_``).
    """
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    definitions = {node.name: node for node in tree.body if isinstance(node, Definition)}
    if function not in definitions:
        msg = f"{path} defines no top-level function {function!r}"
        raise ValueError(msg)

    wanted = {function}
    pending = [definitions[function]]
    while pending:
        for node in ast.walk(pending.pop()):
            name = node.id if isinstance(node, ast.Name) else None
            if name in definitions and name not in wanted and name.startswith("_"):
                wanted.add(name)
                pending.append(definitions[name])

    blocks = []
    used: set[str] = set()
    for name, node in definitions.items():  # dicts keep source order
        if name not in wanted:
            continue
        used.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
        skip = set()
        docstring = ast.get_docstring(node, clean=False)
        if name == function and docstring is not None:
            first = node.body[0]
            skip = set(range(first.lineno - 1, first.end_lineno or first.lineno))
        assert node.end_lineno is not None
        blocks.append("\n".join(lines[i] for i in range(start, node.end_lineno) if i not in skip))
    if exported is None:
        exported = _exported_names(path)
    imports = _imports_used(tree, used, exported)
    return imports + "\n\n\n" + "\n\n\n".join(blocks)


def imports_for(path: Path, code: str) -> str:
    """The import lines of module ``path`` that ``code``, an excerpt of it, uses.

    The same lines :func:`solution_source` puts before a solution (names the package
    exports are imported from it); for the excerpts ``literalinclude`` shows.

    Raises:
      ValueError: if the excerpt uses a name imported from a private module.
    """
    used = {n.id for n in ast.walk(ast.parse(textwrap.dedent(code))) if isinstance(n, ast.Name)}
    return _imports_used(ast.parse(path.read_text()), used, _exported_names(path))


def _imports_used(tree: ast.Module, used: set[str], exported: frozenset[str]) -> str:
    """The module's top-level imports of names in ``used``, grouped as isort groups them."""
    lines: list[str] = []
    from_package: list[ast.alias] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [a for a in node.names if (a.asname or a.name.split(".")[0]) in used]
            lines.extend(ast.unparse(ast.Import(names=[a])) for a in names)
            for alias in names:
                _require_public(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module not in (None, "__future__"):
            assert node.module is not None
            names = [a for a in node.names if (a.asname or a.name) in used]
            if node.module.split(".")[0] == PACKAGE:
                from_package.extend(a for a in names if a.name in exported)
                names = [a for a in names if a.name not in exported]
            if names:
                _require_public(node.module)
                lines.append(ast.unparse(ast.ImportFrom(module=node.module, names=names, level=0)))
    if from_package:
        from_package.sort(key=lambda a: a.name)
        lines.append(ast.unparse(ast.ImportFrom(module=PACKAGE, names=from_package, level=0)))
    groups: dict[int, list[str]] = {}
    for line in lines:
        groups.setdefault(_group(line.split()[1]), []).append(line)
    order = {key: sorted(group, key=_sort_key) for key, group in groups.items()}
    return "\n\n".join("\n".join(order[key]) for key in sorted(order))


def _sort_key(line: str) -> tuple[bool, str]:
    """Isort's order in a group: ``import a`` lines first, then ``from a import`` by module."""
    return line.startswith("from "), line.split()[1]


def _group(module: str) -> int:
    """0 for the standard library, 2 for this package, 1 for the rest."""
    top = module.split(".", maxsplit=1)[0]
    return 0 if top in sys.stdlib_module_names else 2 if top == PACKAGE else 1


def _require_public(module: str) -> None:
    private = [part for part in module.split(".") if part.startswith("_")]
    if private:
        msg = (
            f"the shown code would import from the private module {module!r}: import the "
            "name from a public module in the reference's module instead"
        )
        raise ValueError(msg)


def _exported_names(path: Path) -> frozenset[str]:
    """``__all__`` of the ``shard_tutorial`` package that ``path`` belongs to."""
    for folder in path.parents:
        if folder.name == PACKAGE:
            init = ast.parse((folder / "__init__.py").read_text())
            for node in init.body:
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
                ):
                    return frozenset(ast.literal_eval(node.value))
    return frozenset()
