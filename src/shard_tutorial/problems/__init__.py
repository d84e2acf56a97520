"""The practice problems, one module each, named after the function a solution defines.

Each module holds the problem's reference solution and its :class:`~shard_tutorial.problem.Problem`
record (``PROBLEM``): the oracle and the cases that the tests, the pages and the
checker share. A problem's module is imported when its record is first asked for,
so using one problem does not load the others.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from shard_tutorial.problem import Problem
from shard_tutorial.problem_names import PROBLEM_NAMES

__all__ = ["PROBLEMS", "get_problem"]


class _Registry(Mapping[str, Problem]):
    """A read-only mapping from problem name to record, importing each module on demand."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names

    def __getitem__(self, name: str) -> Problem:
        if name not in self._names:
            raise KeyError(name)
        problem: Problem = importlib.import_module(f"{__name__}.{name}").PROBLEM
        return problem

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"PROBLEMS({', '.join(self._names)})"


PROBLEMS: Mapping[str, Problem] = _Registry(PROBLEM_NAMES)
"""Every problem by name, in the site's reading order."""


def get_problem(name: str) -> Problem:
    """The problem called ``name``.

    Args:
      name: a problem's name, e.g. ``"shard_map_psum"``; dashes work too
        (``"shard-map-psum"``), as in page addresses.

    Returns:
      The :class:`~shard_tutorial.problem.Problem`.

    Raises:
      KeyError: if there is no such problem; the message lists the names.

    Examples:
      >>> from shard_tutorial.problems import get_problem
      >>> get_problem("shard-map-psum").title
      'shard_map with psum'
    """
    key = name.replace("-", "_")
    if key not in PROBLEMS:
        msg = f"no problem named {name!r}; the problems are: {', '.join(PROBLEMS)}"
        raise KeyError(msg)
    return PROBLEMS[key]
