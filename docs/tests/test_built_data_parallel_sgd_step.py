"""What the built page of data_parallel_sgd_step shows: every pitfall run with its numbers,
the copies that disagree, the one all-reduce of the compiled step, the checker's verdicts.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder

NAME = "training/data-parallel-sgd-step"


page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def test_the_worked_example_takes_the_closed_form_step():
    text = cell_output("def local_step(")
    on_8 = re.search(r"on 8 devices: \[([-\d. ]+)\]", text)
    numpy = re.search(r"\(NumPy\): +\[([-\d. ]+)\]", text)
    assert on_8, text
    assert numpy, text
    for got, want in zip(on_8[1].split(), numpy[1].split(), strict=True):
        assert abs(float(got) - float(want)) < 1e-5
    assert cell_output("def step_ratio(").split() == ["[1.]"]


def test_a_local_mean_loss_steps_8_times_too_far_on_8_devices_and_right_on_1():
    text = cell_output("def own_mean_step(")
    assert "8 devices: [8.]" in text
    assert "1 device:  [1.]" in text


def test_collectives_on_summed_gradients_give_8x_and_64x():
    text = cell_output("def grads_then(")
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    assert lines == [
        "loss own mean gradients pmean [8.]",
        "loss own mean gradients psum [64.]",
        "loss pmean gradients psum [8.]",
        "loss pmean gradients pmean [1.]",
    ]


def test_check_vma_false_leaves_8_different_copies_the_first_one_read():
    copies = re.findall(r"cpu:(\d) \[([-\d. e]+)\]", cell_output("split_b.addressable_shards"))
    assert [int(device) for device, _ in copies] == list(range(8))
    values = [tuple(float(v) for v in numbers.split()) for _, numbers in copies]
    assert len(set(values)) == 8  # every device took its own step
    read = cell_output("np.asarray(split_b)")
    whole = re.search(r"np.asarray\(split_b\): +\[([-\d. e]+)\]", read)
    alone = re.search(r"rows 0 and 1 alone: +\[([-\d. e]+)\]", read)
    assert whole, read
    assert alone, read
    assert tuple(float(v) for v in whole[1].split()) == values[0]
    for got, want in zip(values[0], alone[1].split(), strict=True):
        assert abs(got - float(want)) < 1e-5


def test_the_solution_is_replicated_on_8_devices_and_matches_numpy():
    text = cell_output("data_parallel_sgd_step(*case.jax_args())\nfor")
    assert "w P(None, None) on 8 devices" in text
    assert "b P(None,) on 8 devices" in text
    assert "CPU 0,1,2,3,4,5,6,7" in text
    copies = re.findall(r"cpu:(\d) \[([-\d. e]+)\]", text)  # b on each device: one value
    assert [int(device) for device, _ in copies] == list(range(8))
    assert len({numbers for _, numbers in copies}) == 1
    difference = re.search(r"largest difference from NumPy: (\S+)", text)
    assert difference, text
    assert float(difference[1]) < 1e-5


def test_the_compiled_step_runs_one_all_reduce_of_the_gradients():
    [[reduce]] = built_pages.explained(NAME, "explain(data_parallel_sgd_step,")
    assert (reduce["collective"], reduce["by"], reduce["moves"]) == (
        "all-reduce",
        "asked",
        "(f32[3,2], f32[2])",
    )
    assert (reduce["B/run"], reduce["runs"], reduce["B sent"]) == ("56", "1", "56")  # 2 x 7/8 x 32
    assert reduce["line"].startswith("data_parallel_sgd_step.py:")
    assert "block_loss = jnp.mean(" in cell_output("explain(data_parallel_sgd_step,")


def test_the_logged_loss_joins_the_all_reduce():
    [[reduce]] = built_pages.explained(NAME, "explain(jax.jit(logged),")
    assert reduce["collective"] == "all-reduce"
    assert reduce["moves"] == "(f32[3,2], f32[2], f32[])"  # the loss, f32[], joins them
    assert reduce["B sent"] == "63"


def test_the_checker_passes_the_reference_and_explains_the_local_mean_loss():
    assert "PASSED: every case on 1 and 8 devices" in cell_output(
        'check("data_parallel_sgd_step", copied, seed=0)'
    )
    report = " ".join(cell_output("def own_mean_sgd_step(").split())
    assert "FAILED" in report
    assert "The step is 8 times the right one, as on 8 devices" in report


def test_the_solution_dropdown_shows_the_step_and_its_helpers():
    solution = page().select_one("details.sd-dropdown")
    assert solution is not None
    assert not solution.has_attr("open")
    code = solution.get_text()
    for name in ("def data_parallel_sgd_step(", "def _local_step(", "def _sgd_step("):
        assert name in code
    assert "jax.lax.pmean(block_loss" in code


def test_vma_types_are_left_to_the_gradients_page():
    links = [a["href"] for a in page().select("a.reference.internal") if a.get("href")]
    assert any(href.split("#")[0].endswith("gradients.html") for href in links), links


def _runs(text: str) -> list[int]:
    """How many times per step each listed all-reduce runs ("2 x all-reduce -> ...")."""
    return [int(n) for n in re.findall(r"^(\d+) x all-reduce", text, re.MULTILINE)]


def test_accumulating_with_a_pmean_loss_all_reduces_in_every_microbatch():
    text = cell_output("def reduced_every_microbatch(")
    assert _runs(text) == [2], text
    difference = re.search(r"largest difference from NumPy: (\S+)", text)
    assert difference, text
    assert float(difference[1]) < 1e-5


def test_accumulating_varying_gradients_all_reduces_once_and_equals_the_full_step():
    text = cell_output("def accumulated_step(")
    assert _runs(text) == [1], text
    assert "(32 bytes)" in text
    for label in ("from NumPy:", "from the full step:"):
        difference = re.search(rf"largest difference {label} +(\S+)", text)
        assert difference, text
        assert float(difference[1]) < 1e-5


def test_the_cpu_program_has_no_asynchronous_all_reduce_to_overlap():
    text = cell_output('for op in ("all-reduce", "all-reduce-start"')
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    assert lines == ["all-reduce: 1", "all-reduce-start: 0", "all-reduce-done: 0"]


def test_no_collectives_refuses_the_pmean_in_the_loop_and_passes_the_varying_copies():
    """Issue 37: jax.sharding.no_collectives on 0.12, and what 0.10.2 does instead."""
    text = cell_output("one_microbatch(own_copies=False)")
    assert "ForbiddenCollectiveError" in text
    assert "Collective across axis 'data' is forbidden by `no_collectives`" in text
    passed = cell_output("one_microbatch(own_copies=True)")
    assert "no collective over 'data' inside the block: (3, 2) (2,)" in passed
    prose = " ".join(page().get_text(" ").split())
    assert "JAX 0.10.2 has no jax.sharding.no_collectives" in prose
