"""What the built reduce-scatter collective matmul page shows: the ring, and the MLP of two.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder

NAME = "parallelism/collective-matmul-reduce-scatter"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def difference(text: str) -> float:
    """The number printed after "largest difference...:" (one line of ``text``)."""
    (found,) = re.findall(r"largest difference[^:]*: (\S+)", text)
    return float(found)


def test_the_psum_scatter_is_one_reduce_scatter_of_224_bytes():
    assert difference(cell_output("def multiply_then_scatter(")) < 1e-5
    text = cell_output("for c in collectives(scattered,")
    assert "reduce-scatter -> f32[2,4] (32 bytes)" in text
    assert "224 bytes sent per device" in text


def test_every_device_adds_to_every_blocks_sum_once_and_ends_with_its_own():
    text = cell_output("def sums_carried(")
    assert "device 0 adds to the sums of blocks [7 6 5 4 3 2 1 0]" in text
    assert "device 1 adds to the sums of blocks [0 7 6 5 4 3 2 1]" in text
    assert "device 7 adds to the sums of blocks [6 5 4 3 2 1 0 7]" in text


def test_the_ring_picture_is_drawn_from_the_sums_carried():
    (picture,) = page().select("img.ring-steps")
    alt = picture["alt"]
    assert "8 devices, 8 steps." in alt
    assert "Device 0 adds to the sum of block 7, then 6, 5, 4, 3, 2, 1, 0." in alt
    assert "Device 1 adds to the sum of block 0, then 7, 6, 5, 4, 3, 2, 1." in alt


def test_the_ring_sends_the_reduce_scatters_bytes_in_7_collective_permutes():
    text = cell_output("def ring_matmul(")
    assert difference(text) < 1e-5
    assert "7 collectives: {'collective-permute'} f32[2,4]" in text
    assert "224 bytes sent per device" in text


def test_the_sequence_parallel_mlp_of_two_rings_is_one_devices_mlp():
    text = cell_output("def sequence_parallel_mlp(")
    assert difference(text) < 1e-5
    assert "rows per device: 2" in text
    rings = cell_output("found = collectives(sequence_parallel_mlp,")
    assert "{'collective-permute': 14}" in rings
    assert "['f32[2,4]']" in rings
    assert "448 bytes sent per device" in rings
    collectives = cell_output("def with_collectives(")
    assert difference(collectives) < 1e-5
    assert "['all-gather', 'reduce-scatter']" in collectives
    assert "448 bytes sent per device" in collectives  # the same bytes as the rings


def test_each_pitfall_is_shown_for_what_it_computes():
    own = cell_output("def own_share_only(")
    assert "equal to the devices' own shares: True" in own
    assert "equal to h @ w: False" in own
    home = cell_output("def started_at_home(")
    assert "equal to h @ w: False" in home
    assert "block b holds the sum of block b + 1: True" in home


def test_the_solution_splits_the_rows_and_runs_7_permutes():
    text = cell_output("y = collective_matmul_reduce_scatter(h, w)")
    assert "P('model', None) {'model': 8}" in text
    assert difference(text) < 1e-5
    [table] = built_pages.explained(NAME, "explain(collective_matmul_reduce_scatter,")
    rows = [(row["collective"], row["by"], row["moves"], row["B sent"]) for row in table]
    assert rows == [("collective-permute", "asked", "f32[2,4]", "32")] * 7
    assert "7 collectives, 224 B sent per device" in cell_output(
        "explain(collective_matmul_reduce_scatter,"
    )


def test_the_checker_says_where_the_sums_ended():
    section = page().find(id="try-it-yourself").get_text()
    assert "ended on the wrong devices" in section
