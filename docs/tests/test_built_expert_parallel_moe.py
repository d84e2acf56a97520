"""What the built expert-parallel MoE page shows: routing, two all-to-alls, dropping, pitfalls.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder

NAME = "parallelism/expert-parallel-moe"

page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_routing_is_drawn_from_the_arrays():
    assert "Mesh('expert': 8" in cell_output("print(mesh)")
    assert "experts chosen: [6 3 4 6 5 4 1 4 3 5 6 3 6 7 7 7]" in cell_output(
        'print("experts chosen:"'
    )
    text = cell_output("counts = np.zeros((n, n), int)")
    assert "device 0: token 0 -> device 6, token 1 -> device 3" in text
    assert "device 7: token 14 -> device 7, token 15 -> device 7" in text
    assert "tokens each device receives: [0 1 0 3 3 2 4 3]" in text


def test_the_dispatch_buffers_and_the_busy_slots():
    text = cell_output("def show_dispatch(")
    assert text.count("float32[8,2,5]") == 2  # the outbox and the inbox
    assert "busy slots per device: [0, 1, 0, 3, 3, 2, 4, 3]" in cell_output("inbox_blocks =")


def test_the_reference_matches_one_device():
    text = cell_output("y = expert_parallel_moe(x, router_logits, w)")
    assert "{'expert': 8}" in text
    difference = re.search(r"largest difference: (\S+)", text)
    assert difference is not None
    assert float(difference[1]) < 1e-5


def test_two_all_to_alls_and_their_bytes():
    [table] = built_pages.explained(NAME, "explain(expert_parallel_moe,")
    # each device keeps 1 of its 8 buffers and sends 7: 7 x 40 and 7 x 24 bytes
    assert [(row["collective"], row["moves"], row["B sent"]) for row in table] == [
        ("all-to-all", "8 x f32[1,2,5]", "280"),
        ("all-to-all", "8 x f32[1,2,3]", "168"),
    ]
    assert "2 collectives, 448 B sent per device" in cell_output("explain(expert_parallel_moe,")


def test_capacity_and_dropping():
    assert "112 slots sent, for 13 tokens that leave their device" in cell_output("sent_slots =")
    text = cell_output("def dropping_layer(")
    assert "8 of 16 tokens computed, 8 dropped" in text
    assert "the reference drops none: True" in text


def test_the_pitfalls_are_diagnosed():
    assert "best expert on its own device" in flat(cell_output("def local_argmax_layer("))
    assert "stayed on the devices of the experts" in flat(cell_output("def no_return_layer("))
    dealt = flat(cell_output("def round_robin_layer("))
    assert "instead of its expert e: the code looked for expert e on device e % 8" in dealt
    assert "8 of the 16 tokens were dropped" in flat(cell_output("skewed_case = Case("))
    text = cell_output("def gathered_experts_layer(")
    assert "all-gather -> f32[8,4,3] (384 bytes)" in text


def test_ragged_dot_runs_and_ragged_all_to_all_does_not_compile_on_cpu():
    text = cell_output("jax.lax.ragged_dot(")
    assert text.strip().startswith("(5, 3) largest difference:")
    assert "ragged_all_to_all in the lowered program: True" in cell_output("def one_row_to_each(")
    error = flat(cell_output("ragged(rows)"))
    assert "UNIMPLEMENTED: HLO opcode `ragged-all-to-all` is not supported by XLA:CPU" in error


def test_the_reference_copy_passes_the_checker():
    assert "PASSED" in cell_output('check("expert_parallel_moe", reference_copy(')


def test_the_checker_explains_the_forgotten_return_trip():
    text = flat(cell_output("def expert_parallel_moe_without_return("))
    assert "FAILED" in text
    assert "The results stayed on the devices of the experts that computed them" in text


def test_the_mesh_sizes_are_printed_and_the_types_explained():
    """Issue 37, item 16."""
    text = built_pages.cell_output(NAME, "for t, e in")
    for line in (
        "T=16, E= 8: 8 of 8",
        "T=12, E= 6: 6 of 8",
        "T=16, E=12: 4 of 8",
        "T= 6, E= 4: 2 of 8",
        "T= 5, E= 3: 1 of 8",
    ):
        assert line in text, text
    prose = " ".join(built_pages.page(NAME).get_text(" ").split())
    assert "8, 6 of 8, 2 or 1" not in prose
    assert "float32[8,2,5] is 8 buffers of 2 slots of 5 numbers" in prose
    assert (
        built_pages.page(NAME).select_one(
            "a[href$='training/gradients.html#gradients'], a[href*='gradients.html']"
        )
        is not None
    )
