"""What the built page of nnx_data_parallel_step shows: every number it claims, executed.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder

NAME = "training/nnx-data-parallel-step"


page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


def test_the_model_goes_through_device_put_as_a_pytree():
    assert "[(2,), (3, 2)]" in cell_output("jax.tree.leaves(model)")
    shown = cell_output("replicated = jax.device_put(model")
    assert re.search(r"Linear P\((None, None)?\)", shown), shown  # replicated: no axis split


def test_the_sharded_step_equals_the_step_on_one_device():
    assert "same: True" in cell_output("alone = plain_step(")


def test_the_pitfalls_take_steps_8_and_64_times_too_long():
    assert "[8. 8. 8. 8. 8. 8.]" in cell_output("print(ratio(data_parallel(own_mean_loss)")
    assert "[64. 64. 64. 64. 64. 64.]" in cell_output("print(ratio(data_parallel(pmap_recipe)")


def test_the_model_and_its_variables_are_not_arrays():
    shown = cell_output("print(type(trained).__name__")
    assert "Linear Param" in shown
    assert "True float32[3,2]" in shown  # model.kernel[...] is a jax.Array


def test_the_solution_is_replicated_and_the_plain_step():
    assert "same as train_step: True" in cell_output("kernel, bias = nnx_data_parallel_step(")
    assert "True True" in cell_output("w, b = data_parallel_sgd_step(")


def test_the_compiled_step_runs_one_all_reduce_of_both_gradients():
    lines = cell_output("for collective in collectives(").strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("all-reduce -> (")
    assert "f32[3,2]" in lines[0]
    assert "f32[1,2]" in lines[0]
    assert "(32 bytes)" in lines[0]


def test_the_checker_passes_the_reference_and_names_the_returned_model():
    reports = page().find(id="try-it-yourself").select("div.shard-tutorial-check")
    assert "PASSED: every case on 1 and 8 devices" in reports[0].get_text()
    failed = " ".join(reports[1].get_text().split())
    assert "FAILED" in failed
    assert "returned a Linear, not the tuple (kernel, bias)" in failed


def test_every_device_holds_the_same_new_bias():
    lines = cell_output("for shard in bias.addressable_shards:").strip().splitlines()
    assert [line.split()[0] for line in lines] == [f"cpu:{i}" for i in range(8)]
    assert len({line.split(maxsplit=1)[1] for line in lines}) == 1
