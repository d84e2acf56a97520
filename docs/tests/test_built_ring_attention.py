"""What the built ring-attention page shows: the online softmax, the ring, its pitfalls,
its bytes, what it holds, and the causal mask's load imbalance.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder
import pytest

NAME = "parallelism/ring-attention"

cell_output = functools.partial(built_pages.cell_output, NAME)
page = functools.partial(built_pages.page, NAME)


def numbers(line: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?", line)]


def labelled(text: str, label: str) -> list[float]:
    """The numbers printed on the line that starts with ``label``, commas dropped."""
    lines = [line for line in text.splitlines() if line.strip().startswith(label)]
    assert len(lines) == 1, f"{len(lines)} lines start with {label!r} in {text!r}"
    return numbers(lines[0].split(label, 1)[1].replace(",", ""))


def test_the_mesh_is_8_devices_on_seq():
    assert "Mesh('seq': 8" in cell_output("print(mesh)")


def test_the_online_softmax_matches_softmax():
    text = cell_output("for block in range(4):")
    assert text.count("running max") == 4
    assert labelled(text, "blockwise:") == pytest.approx(labelled(text, "softmax:"), abs=1e-5)
    # The maximum grows at block 2: the running sum is rescaled there.
    assert labelled(text, "block 2:")[1] > labelled(text, "block 1:")[1]


def test_the_ring_schedule_is_i_minus_s():
    text = cell_output("def who_holds_what(")
    rows = [numbers(line) for line in text.splitlines() if line.strip().startswith(("[[", "["))]
    assert rows[0][:3] == [0, 7, 6]
    assert rows[-1][:2] == [7, 6]
    assert len(rows) == 8


def test_the_ring_picture_is_drawn_from_the_blocks_held():
    (picture,) = built_pages.page(NAME).select("img.ring-steps")
    alt = picture["alt"]
    assert "8 devices, 8 steps." in alt
    assert "Device 0 holds block 0, then 7, 6, 5, 4, 3, 2, 1." in alt
    assert "Device 3 holds block 3, then 2, 1, 0, 7, 6, 5, 4." in alt


def test_the_reference_matches_one_device_attention():
    text = cell_output("out = ring_attention(q, k, v, causal=causal)")
    lines = [line for line in text.splitlines() if "difference" in line]
    assert len(lines) == 2  # causal=False, then causal=True
    assert "cpu:7 holds rows 56 to 63" in text
    for line in lines:
        assert "('seq', None)" in line
        assert float(line.split("difference ")[1].split(",")[0]) < 1e-5


def test_the_pitfalls_give_wrong_rows():
    right = cell_output("right = ring(q, k, v, True)")
    assert labelled(right, "right, largest difference:")[0] < 1e-5
    rescale = cell_output("rescale=False")
    assert 0 < labelled(rescale, "rows right:")[0] < 64
    assert labelled(rescale, "expected row 9:") != labelled(rescale, "received row 9:")
    assert "the same rows: True" in cell_output("own_block_max = ")
    masks = cell_output('("own block at every step"')
    assert labelled(masks, "own block at every step:")[0] == 63
    assert labelled(masks, "(i + s) mod n:")[0] == 48


def test_gathering_is_right_in_values():
    assert labelled(cell_output("def gather_then_attend("), "largest difference:")[0] < 1e-5


def test_the_ring_sends_7_hops_of_k_and_v_blocks():
    [ring] = built_pages.explained(NAME, "explain(ring_attention,")
    rows = [(row["collective"], row["over"], row["moves"], row["B sent"]) for row in ring]
    assert rows == [("collective-permute", "8 pairs", "f32[8,16]", "512")] * 14
    assert "14 collectives, 7,168 B sent per device" in cell_output("explain(ring_attention,")
    assert "7 hops x 2 blocks x 8 x 16 x 4 bytes = 7,168 bytes" in " ".join(
        page().get_text().split()
    )
    [gathers] = built_pages.explained(NAME, "explain(gathered,")
    rows = [(row["collective"], row["moves"], row["B sent"]) for row in gathers]
    assert rows == [("all-gather", "f32[64,16]", "3,584")] * 2  # 7/8 of 4,096 bytes each


def test_the_ring_holds_less_than_gathering():
    text = cell_output("def memory(")
    ring = labelled(text, "ring:")
    gathered = labelled(text, "gather then attend:")
    whole = labelled(text, "the whole of k and v:")[0]
    assert whole == 262144
    assert ring[0] < whole < gathered[0]
    assert ring[:2] == [166660, 101124]
    assert abs(ring[2] - gathered[2]) < 64  # peak_memory_in_bytes: no temporaries on CPU
    # Issue 37, item 14: "about the same", not "the same" (65,544 against 65,540).
    assert ring[2] != gathered[2]
    prose = " ".join(page().get_text(" ").split())
    assert "reads about the same for both, a few bytes apart" in prose
    code = "\n".join(div.get_text() for div in page().select("div.cell_input"))
    assert "causal=True):" not in code.split("def memory(", 1)[1].split("\n", 1)[0]
    assert "*(jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))" not in code
    plain = labelled(cell_output("def plain_ring("), "ring without barriers:")
    assert ring[0] < plain[0]
    assert "collective-permute-start: 0" in cell_output("compiled_text(")


def test_the_causal_load_is_unbalanced_and_zigzag_balances_it():
    text = cell_output("work = causal_work(64, 8)")
    assert labelled(text, "per device:") == [36, 100, 164, 228, 292, 356, 420, 484]
    assert labelled(text, "steps with any work:") == [1, 2, 3, 4, 5, 6, 7, 8]
    zigzag = cell_output("zigzag = causal_work(64, 8, zigzag=True)")
    assert labelled(zigzag, "per device:") == [260] * 8


def test_the_reference_copy_passes_the_checker():
    text = cell_output('check("ring_attention", reference_copy("ring_attention")')
    assert "PASSED: every case on 1 and 8 devices" in text
