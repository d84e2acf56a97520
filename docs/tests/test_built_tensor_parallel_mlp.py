"""What the built tensor-parallel MLP page shows: its layout, pitfalls and communication.

These read the HTML that ``nox -s docs`` has just built into docs/_build/html (the
checks every problem page gets are in test_built_site.py).
"""

from __future__ import annotations

import functools
import re

import built_pages  # this folder
import pytest

NAME = "training/tensor-parallel-mlp"


page = functools.partial(built_pages.page, NAME)
cell_output = functools.partial(built_pages.cell_output, NAME)


# The outputs reach about 25 in float32: added up in another order (the shares of a
# psum, or on another CPU's kernels), they differ in the last bits, about 2e-6 at 25.
CLOSE = 1e-4


def close(want: list[float]) -> object:
    """``want`` as pytest compares floats, to float32's rounding at these magnitudes."""
    return pytest.approx(want, rel=1e-5, abs=CLOSE)


def numbers(line: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+\.\d*(?:e[-+]?\d+)?", line)]


def labelled(text: str, label: str) -> list[float]:
    """The numbers printed on the line that starts with ``label``."""
    lines = [line for line in text.splitlines() if line.strip().startswith(label)]
    assert len(lines) == 1, f"{len(lines)} lines start with {label!r} in {text!r}"
    return numbers(lines[0].split(label, 1)[1])


def test_the_2_by_4_layout_is_drawn_for_each_array():
    assert "Mesh('data': 2, 'model': 4" in cell_output("print(mesh)")
    # x by rows: each block on a row of the mesh; w1 by columns: on a column of it.
    assert "CPU 0,1,2,3" in cell_output("visualize_array_sharding(x_split)")
    assert "CPU 4,5,6,7" in cell_output("visualize_array_sharding(x_split)")
    assert "CPU 0,4" in cell_output("visualize_array_sharding(w1_split)")
    assert "CPU 3,7" in cell_output("visualize_array_sharding(w2_split)")


def test_the_worked_example_shows_the_types_and_matches_the_unsharded_mlp():
    types = cell_output("def local_mlp(").split()
    assert types[:2] == ["float32[8,16]{V:data}", "float32[16,8]{V:model}"]
    # A share varies over both axes (written {V:(data,model)} or {V:data,model}).
    assert types[3].replace("(", "").replace(")", "") == "float32[8,3]{V:data,model}"
    assert types[4] == "float32[8,3]{V:data}"  # after the psum over "model"
    difference = labelled(cell_output("jnp.abs(out - expected)"), "largest")
    assert difference[0] < CLOSE


def test_relu_per_unit_sums_to_the_output():
    text = cell_output("per_unit = sum(")
    assert labelled(text, "sum over units:") == close(labelled(text, "output:"))


def test_no_psum_is_refused_then_wrong_then_right_on_a_model_axis_of_one():
    refused = cell_output("tensor_parallel(no_psum, mesh)")
    assert "check_vma=False" in refused
    assert "'no_psum'" in refused  # under jit: the reader's function, not JAX's helper
    assert "_rem_singleton" not in refused
    text = cell_output("wrong = tensor_parallel(no_psum, mesh, check_vma=False)")
    assert labelled(text, "received:") == labelled(text, "units 0-7 only:")
    assert labelled(text, "received:") != labelled(text, "expected:")
    right = cell_output("mesh_8x1 = jax.make_mesh")
    assert labelled(right, "8 x 1, largest difference:")[0] < CLOSE


def test_psum_over_data_adds_rows_and_relu_after_the_psum_clips_the_output():
    text = cell_output("def psum_over_data(")
    assert labelled(text, "received row 0:") == close(labelled(text, "rows 0 + 8, units 0-7:"))
    assert labelled(text, "received row 0:") != labelled(text, "expected row 0:")
    text = cell_output("def relu_after_psum(")
    assert labelled(text, "received:") == close(labelled(text, "relu(x @ w1 @ w2):"))
    assert labelled(text, "received:") != labelled(text, "expected:")


def test_the_solution_runs_on_the_2_by_4_mesh_rows_over_data():
    text = cell_output("y = tensor_parallel_mlp(x, w1, w2)")
    assert "P('data', None) {'data': 2, 'model': 4}" in text
    assert labelled(text, "largest difference:")[0] < CLOSE
    assert "cpu:3 holds rows 0 to 7" in text
    assert "cpu:4 holds rows 8 to 15" in text


def test_the_compiled_program_has_one_all_reduce_over_the_model_groups():
    [[reduce]] = built_pages.explained(NAME, "explain(tensor_parallel_mlp,")
    assert (reduce["collective"], reduce["by"]) == ("all-reduce", "asked")
    assert reduce["over"] == "4 devices (model) x 2 groups"  # the psum over "model"
    assert (reduce["moves"], reduce["B sent"]) == ("f32[8,3]", "144")  # 2 x 3/4 x 96
    text = cell_output("program_lines(tensor_parallel_mlp")  # XLA's own line
    assert text.count("all-reduce(") == 1
    assert "f32[8,3]" in text
    # The groups: the rows of the mesh, by axis name (XLA today) or by device ids (older).
    assert "{'model'}" in text or "{{0,1,2,3},{4,5,6,7}}" in text
    assert "[CpuDevice(id=0) CpuDevice(id=1) CpuDevice(id=2) CpuDevice(id=3)]" in text


def test_the_checker_explains_the_missing_psum():
    text = " ".join(cell_output("def mlp_without_psum(").split())
    assert "FAILED" in text
    assert "pass*" in text  # right values on 1 device and on 8 x 1: a sum over one adds nothing
    assert "one device's share only" in text


def groups_of(line: str) -> str:
    """The groups of a collective's line, the mesh axes they run along, on any XLA."""
    groups = line.split(" among ", 1)[1]
    by_ids = {"{{0,1,2,3},{4,5,6,7}}": "{'model'}", "{{0,4},{1,5},{2,6},{3,7}}": "{'data'}"}
    return by_ids.get(groups, groups.split("] ", 1)[-1])


def test_the_backward_pass_all_reduces_the_gradient_of_x_over_model():
    casts = cell_output("def local_mlp_only(").strip().splitlines()
    assert len(casts) == 3
    assert "f32[8,16]" in casts[0]
    assert "pvary[axes=('model',)]" in casts[0]  # x, cast over "model"
    assert all("pvary[axes=('data',)]" in line for line in casts[1:])  # w1, w2
    text = cell_output("grad_x = jax.jit(jax.grad(loss))")
    assert labelled(text, "largest difference from one device:")[0] < CLOSE
    reduces = [line for line in text.splitlines() if line.startswith("all-reduce")]
    assert [line.split(" (")[0] for line in reduces] == [
        "all-reduce -> f32[8,3]",  # g: the forward pass's psum
        "all-reduce -> f32[8,16]",  # f: the backward pass's, the gradient of x
    ]
    assert [groups_of(line) for line in reduces] == ["{'model'}", "{'model'}"]
    prose = " ".join(page().get_text(" ").split())
    assert "Megatron-LM names f and g" in prose


def test_sequence_parallelism_trades_each_all_reduce_for_a_gather_and_a_scatter():
    text = cell_output("def sequence_parallel_mlp(")
    assert labelled(text, "largest difference:")[0] < CLOSE
    assert "rows per device: 2" in text
    listed = [line.split(" (")[0] for line in text.splitlines() if " -> " in line]
    assert listed == [
        "all-gather -> f32[8,16]",
        "reduce-scatter -> f32[2,3]",
        "all-gather -> f32[8,3]",
        "reduce-scatter -> f32[2,16]",
    ]
    assert "all-reduce" not in text
    sent = dict(
        re.findall(
            r"^(tensor parallel|sequence parallel): ([\d,]+) bytes",
            cell_output('("sequence parallel", sp_grad_x, x_rows)'),
            re.MULTILINE,
        )
    )
    assert sent["tensor parallel"] == sent["sequence parallel"] == "912"
