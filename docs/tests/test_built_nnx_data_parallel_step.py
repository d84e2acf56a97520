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
    [[reduce]] = built_pages.explained(NAME, "explain(nnx_data_parallel_step,")
    assert (reduce["collective"], reduce["by"]) == ("all-reduce", "asked")
    assert reduce["moves"] == "(f32[1,2], f32[3,2])"  # bias and kernel: 32 bytes
    assert reduce["B sent"] == "56"  # 2 x 7/8 x 32


def test_the_checker_passes_the_reference_and_names_the_returned_model():
    reports = page().find(id="try-it-yourself").select("div.shard-tutorial-check")
    assert "PASSED: every case on 1 and 8 devices" in reports[0].get_text()
    failed = " ".join(reports[1].get_text().split())
    assert "FAILED" in failed
    assert "8 devices" in failed  # checked on 8 devices only: devices=(8,)
    assert "returned a Linear, not the tuple (kernel, bias)" in failed


def test_every_device_holds_the_same_new_bias():
    lines = cell_output("for shard in bias.addressable_shards:").strip().splitlines()
    assert [line.split()[0] for line in lines] == [f"cpu:{i}" for i in range(8)]
    assert len({line.split(maxsplit=1)[1] for line in lines}) == 1


def _steps(text: str, label: str) -> list[float]:
    """The differences printed for steps 1, 2, 3 after ``label`` ("step 2: from momentum 0.0699")."""
    found = re.findall(rf"step (\d): {label} ([\d.e+-]+)", text)
    assert [int(step) for step, _ in found] == [1, 2, 3], text
    return [float(value) for _, value in found]


def test_momentum_built_inside_the_step_forgets_its_trace_and_follows_plain_sgd():
    text = cell_output("def loss_of_batch(")
    from_momentum = _steps(text, "from momentum")
    assert from_momentum[0] < 1e-6  # the first step agrees: the trace starts at zero
    assert from_momentum[1] > 1e-2  # then the step without the trace drifts away
    assert from_momentum[2] > from_momentum[1]
    assert all(value < 1e-6 for value in _steps_plain(text))


def _steps_plain(text: str) -> list[float]:
    found = re.findall(r"from plain SGD ([\d.e+-]+)", text)
    assert len(found) == 3, text
    return [float(value) for value in found]


def test_the_optimizer_passed_through_shard_map_equals_optax_on_one_device():
    text = cell_output("def stateful_step(")
    assert all(value < 1e-6 for value in _steps(text, "from momentum on one device"))
    assert re.search(r"the trace of the kernel: float32\[3,2\] P\((None, None)?\)", text), text


def test_flax_annotations_give_the_fsdp_and_tp_layouts():
    fsdp = cell_output("def specs(model):")
    assert "['kernel'].value P('data', None)" in fsdp
    assert "['bias'].value P()" in fsdp
    assert "float32[8@data,2] float32[2]" in fsdp
    tp = cell_output("class MLP(nnx.Module):")
    assert "['up']['kernel'].value P(None, 'model')" in tp
    assert "['down']['kernel'].value P('model', None)" in tp
    assert "float32[4,16@model] float32[16@model,4]" in tp
    assert "[P('model', None), P(None, 'model')]" in tp  # nnx.get_named_sharding
    refused = cell_output("# no mesh set here")
    assert "ValueError" in refused
    assert "4844-var-eager-sharding" in refused
