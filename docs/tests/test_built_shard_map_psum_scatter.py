"""What the built page "shard_map with psum_scatter" shows when the checks refuse an output.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools

import built_pages  # this folder

NAME = "collectives/shard-map-psum-scatter"

cell_output = functools.partial(built_pages.cell_output, NAME)


def test_the_refusal_names_the_readers_function_not_a_jax_helper():
    text = cell_output("def partial_sums(rows):")
    assert "'partial_sums'" in text
    assert "_rem_singleton" not in text
