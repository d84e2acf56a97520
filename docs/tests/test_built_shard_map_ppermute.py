"""What the built page "shard_map with ppermute" shows: rolling within blocks is wrong at their edges.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder
import numpy as np

NAME = "collectives/shard-map-ppermute"

cell_output = functools.partial(built_pages.cell_output, NAME)


def floats(text: str) -> np.ndarray:
    return np.array([float(n) for n in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", text)])


def test_rolling_within_blocks_is_wrong_at_every_block_edge_and_right_inside():
    text = cell_output('print("2 per block:"')
    two = floats(text.split("2 per block:")[1].split("4 per block:")[0])
    assert two.size == 16
    assert (np.abs(two) > 1e-3).all()  # with 2 per block, every element is at an edge
    four = floats(text.split("4 per block:")[1]).reshape(8, 4)
    assert (np.abs(four[:, 1:3]) < 1e-3).all()  # inside each block: right
    assert (np.abs(four[:, [0, 3]]) > 1e-3).all()  # at each edge: wrong
