"""What the built migrating page shows for the names that are gone or renamed: each executed.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import functools

import built_pages  # this folder

NAME = "migrating"

cell_output = functools.partial(built_pages.cell_output, NAME)


def test_use_mesh_is_gone_and_set_mesh_sets_the_mesh_for_its_block_only():
    assert "has no attribute 'use_mesh'" in cell_output("jax.sharding.use_mesh(mesh)")
    shown = cell_output('print("inside: "')
    assert "inside:  ('rows', 'cols')" in shown
    assert "outside: ()" in shown


def test_positional_sharding_is_gone_and_named_sharding_gives_the_layout():
    assert "has no attribute 'PositionalSharding'" in cell_output(
        "jax.sharding.PositionalSharding(jax.devices())"
    )
    shown = cell_output('NamedSharding(two_axes, P("rows", "cols"))')
    assert "float32[8@rows,4@cols] | each block: (2, 2)" in shown
    assert "float32[4] | each device holds [0. 1. 2. 3.]" in shown


def test_xmap_is_gone_and_vmap_with_spmd_axis_name_splits_the_mapped_axis():
    assert "No module named 'jax.experimental.maps'" in cell_output(
        "from jax.experimental.maps import xmap"
    )
    assert "P('x',) True" in cell_output('spmd_axis_name="x"')


def test_the_short_names_are_the_long_ones():
    assert cell_output("jax.P is jax.sharding.PartitionSpec").split() == ["True", "True", "True"]
    assert "float32[8@rows,4@cols] -> float32[8,4]" in cell_output("jax.reshard(matrix, jax.P())")
