"""What the built page "shard_map with all_gather" shows about the type of a gathered value.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools

import built_pages  # this folder

NAME = "collectives/shard-map-all-gather"

cell_output = functools.partial(built_pages.cell_output, NAME)


def test_a_gathered_value_is_varying_so_out_specs_p_is_refused():
    text = cell_output("def whole_vector(block):")
    assert "gathered: int32[16]{V:data}" in text
    assert "ValueError" in text
    assert "'whole_vector'" in text  # under jit: the error names the reader's function


def test_to_invarying_gives_an_invariant_value_from_the_same_all_gather():
    text = cell_output("def whole_vector_invariant(block):")
    assert "gathered: int32[16]\n" in text  # no {V:data}
    assert "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15]" in text
    assert "all-gather(" in text
    text = cell_output('hasattr(jax.lax, "all_gather_invariant")')
    assert "= all_gather_invariant[" in text
    assert "jax.lax.all_gather_invariant exists: False" in text
