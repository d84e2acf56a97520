"""The practice problems, one module each, named after the function a solution defines.

Each module holds the problem's reference solution and its :class:`~shard_tutorial.problem.Problem`
record (``PROBLEM``): the oracle and the cases that the tests, the pages and the
checker share.
"""

from __future__ import annotations

from shard_tutorial.problem import Problem
from shard_tutorial.problems import (
    shard_map_double,
    shard_map_psum,
    shard_map_simulate,
    shard_map_vs_vmap,
)

__all__ = ["PROBLEMS", "get_problem"]

PROBLEMS: dict[str, Problem] = {
    module.PROBLEM.name: module.PROBLEM
    for module in (shard_map_double, shard_map_vs_vmap, shard_map_psum, shard_map_simulate)
}
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
