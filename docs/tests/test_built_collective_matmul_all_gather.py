"""What the built all-gather collective matmul page shows: the ring's blocks and bytes.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder

NAME = "parallelism/collective-matmul-all-gather"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def difference(text: str) -> float:
    """The number printed after "largest difference:" (one line of ``text``)."""
    (found,) = re.findall(r"largest difference: (\S+)", text)
    return float(found)


def test_the_mesh_has_8_devices_on_model():
    assert "Mesh('model': 8" in cell_output("use_cpu_devices(8)")


def test_gathering_first_is_one_all_gather_of_224_bytes():
    assert difference(cell_output("def gather_then_multiply(")) < 1e-5
    text = cell_output("for c in collectives(gathered,")
    assert "all-gather -> f32[16,4] (256 bytes)" in text
    assert "224 bytes sent per device" in text


def test_each_device_holds_every_block_once_round_the_ring():
    text = cell_output("def blocks_held(")
    assert "device 0 holds blocks [0 1 2 3 4 5 6 7]" in text
    assert "device 1 holds blocks [1 2 3 4 5 6 7 0]" in text
    assert "device 7 holds blocks [7 0 1 2 3 4 5 6]" in text


def test_the_ring_picture_is_drawn_from_the_blocks_held():
    (picture,) = page().select("img.ring-steps")
    alt = picture["alt"]
    assert alt.startswith(
        "The block of x's rows each device holds (8 devices): 8 devices, 8 steps."
    )
    assert "Device 1 holds block 1, then 2, 3, 4, 5, 6, 7, 0." in alt
    assert "Device 7 holds block 7, then 0, 1, 2, 3, 4, 5, 6." in alt


def test_the_ring_sends_the_all_gathers_bytes_in_7_collective_permutes():
    assert difference(cell_output("def ring_matmul(")) < 1e-5
    text = cell_output("found = collectives(ring,")
    assert "7 collectives: {'collective-permute'} f32[2,4]" in text
    assert "224 bytes sent per device" in text


def test_the_cpu_program_runs_the_permutes_synchronously():
    text = cell_output("compiled_text(ring,")
    assert "collective-permute lines: 7" in text
    assert "asynchronous pairs: 0" in text


def test_the_bidirectional_ring_sends_half_blocks_both_ways_and_the_same_bytes():
    text = cell_output("def bidirectional_matmul(")
    assert difference(text) < 1e-5
    assert "14 collective-permutes of f32[1,4] in 2 directions" in text
    assert "224 bytes sent per device" in text
    # Issue 37, item 3: (n - 1) / 2 one-way steps, not n / 2.
    assert "7 steps of half a block each way at once: the time of 3.5 one-way steps" in text
    assert "(n - 1) / 2 = 3.5" in text
    prose = " ".join(page().get_text(" ").split())
    assert "transfer time of (n - 1) / 2 one-way steps" in prose


def test_each_pitfall_shows_which_rows_are_right():
    own = cell_output("def own_block_only(")
    assert "device 0: rows [0 1]" in own
    assert "device 7: rows [14 15]" in own
    wrong_way = cell_output("def wrong_way(")
    assert "device 0: rows [0 1 8 9]" in wrong_way
    assert "device 4: rows [0 1 8 9]" in wrong_way


def test_the_solution_splits_the_columns_and_runs_7_permutes():
    text = cell_output("y = collective_matmul_all_gather(x, w)")
    assert "P(None, 'model') {'model': 8}" in text
    assert difference(text) < 1e-5
    [table] = built_pages.explained(NAME, "explain(collective_matmul_all_gather, x_rows")
    rows = [(row["collective"], row["by"], row["moves"], row["B sent"]) for row in table]
    assert rows == [("collective-permute", "asked", "f32[2,4]", "32")] * 7
    assert "7 collectives, 224 B sent per device" in cell_output(
        "explain(collective_matmul_all_gather, x_rows"
    )


def test_one_device_runs_no_collective():
    assert built_pages.explained(NAME, "x_one, w_one = ") == []
    text = cell_output("x_one, w_one = ")
    assert "1 program on 1 device, 0 collectives, 0 B sent per device" in text


def test_the_checker_names_the_gather_it_refuses():
    section = page().find(id="try-it-yourself").get_text()
    assert "runs 1 all-gather" in section
