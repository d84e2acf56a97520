"""The checker on tensor_parallel_mlp: a reader's right solution passes; each classic
mistake of its page, written as a reader would, fails with its explanation (the
reference's file passes, in test_checker.py, as every problem's does).

Each check runs the solution in fresh processes on 1 and 8 fake devices, whatever device
count this test process has: one check per file, with a fixed seed for the random cases.
"""

from __future__ import annotations

from judging import check_here

# Judged in this process (judging.check_here: the checker's worker step and judge, no
# subprocess), at the suite's device count, 1 or 8; the checker's isolation of a
# reader's code is tested in test_checker.py and test_checker_careless.py.

NAME = "tensor_parallel_mlp"
SEED = 13

# A reader's solution, with the one line of the local function left to each file.
TEMPLATE = """\
import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh


def local(x, w1, w2):
    {body}


def tensor_parallel_mlp(x, w1, w2):
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    w1 = jax.device_put(w1, NamedSharding(mesh, P(None, "model")))
    w2 = jax.device_put(w2, NamedSharding(mesh, P("model", None)))
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P("data", None), P(None, "model"), P("model", None)),
        out_specs=P("data", None),
        check_vma={check_vma},
    )(x, w1, w2)
"""

RIGHT = 'return jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "model")'
# With check_vma=True, JAX refuses the first two at trace time (out_specs=P("data", None)
# says the output is the same on every "model" device, and JAX cannot show it is); its
# error suggests check_vma=False, which lets the wrong values through.
NO_PSUM = "return jax.nn.relu(x @ w1) @ w2"
PSUM_OVER_DATA = 'return jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "data")'
RELU_AFTER_PSUM = 'return jax.nn.relu(jax.lax.psum(x @ w1 @ w2, "model"))'

# The cases whose mesh has one device on "model", on 1 device and on 8.
MODEL_AXIS_OF_ONE = ("B=8, h=3: 8 x 1, data parallel only", "B=7, h=5: 7 x 1")


def _check(tmp_path, body, *, check_vma=True, few=True, lean=False):
    path = tmp_path / f"{NAME}.py"
    path.write_text(TEMPLATE.format(body=body, check_vma=check_vma))
    report = check_here(NAME, path, seed=SEED, few=few, lean=lean)
    return report, " ".join(str(report).split())  # the report wraps its lines


def test_a_readers_right_solution_passes(tmp_path):
    report, text = _check(tmp_path, RIGHT, lean=True)  # a right answer's cases (judging.py)
    assert report.passed, text


def test_no_psum_is_right_when_the_model_axis_has_one_device_and_wrong_on_2_by_4(
    tmp_path, device_count
):
    report, text = _check(tmp_path, NO_PSUM, check_vma=False, few=False)
    (run,) = report.runs
    if device_count == 1:
        # One device: the mesh is 1 x 1, the share is the whole: right values, and a sum
        # over one device adds nothing, so shard_map alone is asked (pass*).
        assert run.passed, text
        return
    by_label = {r.label: r for r in run.results}
    for label in MODEL_AXIS_OF_ONE:  # 8 x 1 and 7 x 1: right values again, nothing to add
        assert by_label[label].status == "pass", text
        assert by_label[label].message, text  # judged in part
    wrong = by_label["B=16, h=32: a 2 x 4 mesh on 8 devices"]
    assert wrong.status == "fail", text
    assert "the devices hold different values" in wrong.message
    assert "one device's share only" in wrong.message
    assert "the first 8 of the 32 hidden units" in wrong.message
    assert 'jax.lax.psum over "model"' in wrong.message


def test_psum_over_data_fails_with_its_explanation(tmp_path, device_count):
    report, text = _check(tmp_path, PSUM_OVER_DATA, check_vma=False)
    (run,) = report.runs
    if device_count == 1:
        assert {r.status for r in run.results} <= {"technique", "pass"}, text  # a 1 x 1 mesh
        return
    assert not run.passed
    assert "Each block of 8 rows is the sum of the 2 blocks' outputs" in text
    assert 'as a psum over "data"' in text


def test_relu_after_the_psum_fails_on_every_device_count(tmp_path):
    report, text = _check(tmp_path, RELU_AFTER_PSUM)
    (run,) = report.runs
    assert not run.passed
    assert "This is relu(x @ w1 @ w2): relu was applied after the psum" in text


def test_the_files_define_the_problems_function():
    for body in (RIGHT, NO_PSUM, PSUM_OVER_DATA, RELU_AFTER_PSUM):
        source = TEMPLATE.format(body=body, check_vma=False)
        compile(source, NAME, "exec")
        assert f"def {NAME}(x, w1, w2):" in source
