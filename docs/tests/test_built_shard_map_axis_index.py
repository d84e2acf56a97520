"""What the built page "shard_map with axis_index" shows: any device count, the scan, the psum pitfall.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder
import numpy as np

NAME = "collectives/shard-map-axis-index"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def prose() -> str:
    return " ".join(page().get_text(" ").split()).replace("\u2019", "'")


def lines(text: str) -> list[str]:
    """The lines of an output that are not blank."""
    return [line for line in text.splitlines() if line.strip()]


def ints(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"-?\d+", text)]


def source_of(marker: str) -> str:
    """The code of the one cell whose code contains ``marker``."""
    cells = [
        code.get_text()
        for code in page().select("div.cell div.cell_input")
        if marker in code.get_text()
    ]
    assert len(cells) == 1, f"{len(cells)} cells contain {marker!r}"
    return cells[0]


def test_the_worked_example_reads_the_device_count_from_the_axis():
    code = source_of("def offset_block_cumsum(")
    assert "jax.lax.axis_size(" in code
    assert "arange(8)" not in code  # the mesh of the problem has 1 to 8 devices
    assert cell_output("def offset_block_cumsum(").split()[-1] == "True"
    found = lines(cell_output("def on_first_devices("))
    assert [line.split(":")[0] for line in found] == ["1 devices", "3 devices", "6 devices"]
    assert all(line.endswith("same as NumPy: True") for line in found)


def test_the_log_step_scan_is_right_and_compiles_to_log2_n_permutes():
    text = cell_output("def log_step_offsets(")
    assert ints(lines(text)[0]) == np.cumsum(np.arange(1, 17)).tolist()
    assert text.count("same as NumPy: True") == 4  # 8 devices, then 1, 3 and 6
    assert "False" not in text
    code = source_of("def log_step_offsets(")
    assert "ppermute" in code
    assert "all_gather" not in code
    listed = lines(cell_output("for collective in collectives(scanned, x)"))
    assert [line.split(" ->")[0] for line in listed] == ["collective-permute"] * 3  # log2(8)
    assert "1, 2, then 4 places on" in prose()


def test_psum_of_every_total_is_right_for_no_device():
    text = cell_output("with_everything = jax.shard_map(")
    received = np.array(ints(text.split("received:")[1].split("expected:")[0]))
    expected = np.array(ints(text.split("expected:")[1]))
    assert expected.tolist() == np.cumsum(np.arange(1, 17)).tolist()
    assert received.tolist()[-2:] == [151, 167]
    assert expected.tolist()[-2:] == [120, 136]
    local = np.cumsum(np.arange(1, 17).reshape(8, 2), axis=1).reshape(-1)
    assert (received - local == 136).all()  # the grand total, on every device
    blocks_right = [
        (r == e).all() for r, e in zip(received.reshape(8, 2), expected.reshape(8, 2), strict=True)
    ]
    assert not any(blocks_right)
    assert "right for no device" in prose()
    assert "which is right for the last device only" not in prose()
