"""tensor_parallel_mlp against NumPy and its unsharded twin; its mesh, layout and explanations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shard_tutorial import PROBLEMS, data_model_shape, tensor_parallel_mlp
from shard_tutorial.compiled import collectives
from shard_tutorial.problem import Case

PROBLEM = PROBLEMS["tensor_parallel_mlp"]


def _case(batch: int, d: int, hidden: int, d_out: int, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    shapes = ((batch, d), (d, hidden), (hidden, d_out))
    args = tuple(rng.normal(size=shape).astype(np.float32) for shape in shapes)
    return Case(f"B={batch}, d={d}, h={hidden}, d_out={d_out}", args)


@given(
    batch=st.integers(0, 16),
    d=st.integers(1, 5),
    hidden=st.integers(0, 12),
    d_out=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_any_shapes_match_numpy(batch, d, hidden, d_out, seed):
    case = _case(batch, d, hidden, d_out, seed)
    out = tensor_parallel_mlp(*case.jax_args())
    expected = PROBLEM.expected(case)  # NumPy, in float64
    assert out.shape == expected.shape
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out, expected, rtol=PROBLEM.rtol, atol=PROBLEM.atol)
    # The mesh the contract asks for, whatever the shapes: rows over "data".
    assert dict(out.sharding.mesh.shape) == dict(
        zip(("data", "model"), data_model_shape(batch, hidden), strict=True)
    )
    assert tuple(out.sharding.spec) == ("data", None)


@pytest.mark.parametrize(("batch", "hidden"), [(16, 32), (6, 4), (8, 8), (2, 12)])
def test_shapes_that_allow_it_run_on_a_2_by_4_mesh_on_8_devices(batch, hidden, device_count):
    out = tensor_parallel_mlp(*_case(batch, 3, hidden, 2).jax_args())
    want = (2, 4) if device_count == 8 else (1, 1)
    assert tuple(out.sharding.mesh.shape.values()) == want
    assert tuple(out.sharding.spec) == ("data", None)
    # Each device holds its block of rows, the same block on every "model" device.
    assert len(out.sharding.device_set) == want[0] * want[1]
    for shard in out.addressable_shards:
        assert shard.data.shape == (batch // want[0], 2)


def test_the_hidden_units_are_added_up_by_one_all_reduce_over_model(device_count):
    found = collectives(tensor_parallel_mlp, *_case(16, 4, 32, 3).jax_args())
    assert [c.kind for c in found] == ["all-reduce"]  # on 1 device, among that one device
    assert found[0].result == ("f32[8,3]" if device_count == 8 else "f32[16,3]")
    if device_count == 8:
        # The rows of the 2 x 4 mesh: by axis name (jax 0.12's XLA) or device ids (older).
        assert found[0].groups in (
            "mesh['data'=2,'model'=4] {'model'}",
            "{{0,1,2,3},{4,5,6,7}}",
        )


def test_no_hidden_units_give_zeros_and_an_empty_batch_an_empty_output():
    assert np.array_equal(tensor_parallel_mlp(*_case(4, 3, 0, 2).jax_args()), np.zeros((4, 2)))
    assert tensor_parallel_mlp(*_case(0, 3, 8, 2).jax_args()).shape == (0, 2)


def test_integers_are_exact():
    rng = np.random.default_rng(3)
    x, w1, w2 = (rng.integers(-9, 10, size=s, dtype=np.int32) for s in ((8, 3), (3, 8), (8, 2)))
    out = tensor_parallel_mlp(jnp.asarray(x), jnp.asarray(w1), jnp.asarray(w2))
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(out, np.maximum(x @ w1, 0) @ w2)


@pytest.mark.parametrize(("batch", "hidden"), [(16, 32), (5, 8), (8, 3)])
def test_jit_gives_the_eager_result(batch, hidden):
    args = _case(batch, 4, hidden, 3).jax_args()
    np.testing.assert_allclose(
        jax.jit(tensor_parallel_mlp)(*args), tensor_parallel_mlp(*args), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize(("batch", "hidden"), [(16, 32), (6, 4), (7, 5)])
@pytest.mark.parametrize("jit", [False, True])
def test_grad_wrt_w1_and_w2_equals_the_unsharded_twins(batch, hidden, jit):
    x, w1, w2 = _case(batch, 4, hidden, 3, seed=1).jax_args()
    # A loss that weighs every output element differently, so no error can cancel out.
    weights = jnp.asarray(np.random.default_rng(2).normal(size=(batch, 3)), jnp.float32)

    def grads(mlp):
        def loss(w1, w2):
            return jnp.sum(mlp(x, w1, w2) * weights)

        grad = jax.grad(loss, argnums=(0, 1))
        return (jax.jit(grad) if jit else grad)(w1, w2)

    for got, want in zip(grads(tensor_parallel_mlp), grads(PROBLEM.unsharded), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (((4, 3), (2, 8), (8, 2)), ValueError, ["w1 has 2 rows", "x has 3 columns"]),
        (((4, 3), (3, 8), (5, 2)), ValueError, ["w2 has 5 rows", "w1 has 8 columns"]),
        (((4,), (3, 8), (8, 2)), ValueError, ["x must be a 2-D array", "(B, d)"]),
        (((4, 3), (3, 8, 1), (8, 2)), ValueError, ["w1 must be a 2-D array", "(d, h)"]),
        (((4, 3), (3, 8), (8,)), ValueError, ["w2 must be a 2-D array", "(h, d_out)"]),
    ],
)
def test_shapes_that_do_not_fit_are_named(args, error, words):
    with pytest.raises(error) as info:
        tensor_parallel_mlp(*(jnp.ones(shape) for shape in args))
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("position", "value", "words"),
    [
        (0, [[1.0, 2.0]], ["x must be a 2-D array", "list"]),
        (1, jnp.ones((2, 3), bool), ["w1 must hold numbers", "bool"]),
        (2, jnp.ones((3, 1), jnp.complex64), ["w2 must hold real numbers", "complex64"]),
    ],
)
def test_bad_values_are_named(position, value, words):
    args = [jnp.ones((1, 2)), jnp.ones((2, 3)), jnp.ones((3, 1))]
    args[position] = value
    with pytest.raises(TypeError) as info:
        tensor_parallel_mlp(*args)
    for word in words:
        assert word in str(info.value)


def test_generated_cases_keep_the_contract_and_match_numpy(assert_matches_oracle):
    rng = np.random.default_rng(11)
    for _ in range(6):
        case = PROBLEM.generate(rng)
        x, w1, w2 = case.args
        assert x.shape[1] == w1.shape[0]
        assert w1.shape[1] == w2.shape[0]
        assert x.shape[0] >= 1
        assert w1.shape[1] >= 1
        assert_matches_oracle(PROBLEM, case, tensor_parallel_mlp(*case.jax_args()))


# The classic mistakes, rebuilt in NumPy for a (data, model) mesh: the explanations must
# recognise them from the output alone.


def _relu(a):
    return np.maximum(a, 0)


def _model_share(case, model):
    x, w1, w2 = (a.astype(np.float64) for a in case.args)
    units = w1.shape[1] // model  # the first "model" device's hidden units
    return _relu(x @ w1[:, :units]) @ w2[:units]


def _explained(case, received):
    message = PROBLEM.diagnose(case, received.astype(np.float32))
    assert message is not None, "a wrong answer was taken for right"
    return message


@pytest.mark.parametrize(("batch", "hidden", "model"), [(16, 32, 4), (6, 4, 4), (5, 8, 8)])
def test_no_psum_is_one_model_devices_share(batch, hidden, model):
    case = _case(batch, 3, hidden, 2, seed=5)
    message = _explained(case, _model_share(case, model))
    assert "one device's share" in message
    assert f"the first {hidden // model} of the {hidden} hidden units" in message
    assert 'psum over "model"' in message


def test_no_psum_on_a_model_axis_of_one_device_is_right():
    case = _case(8, 3, 3, 2, seed=5)
    assert PROBLEM.diagnose(case, _model_share(case, 1).astype(np.float32)) is None


@pytest.mark.parametrize(("batch", "hidden", "data", "model"), [(16, 32, 2, 4), (8, 3, 8, 1)])
def test_psum_over_data_adds_rows_of_different_blocks(batch, hidden, data, model):
    case = _case(batch, 3, hidden, 2, seed=6)
    total = sum(np.split(_model_share(case, model), data))
    message = _explained(case, np.tile(total, (data, 1)))
    assert f"sum of the {data} blocks' outputs" in message
    assert 'psum over "data"' in message
    assert ("nothing added over" in message) == (model > 1)


@pytest.mark.parametrize(("batch", "hidden"), [(16, 32), (7, 5)])
def test_relu_after_the_psum_is_named(batch, hidden):
    case = _case(batch, 3, hidden, 2, seed=7)
    x, w1, w2 = (a.astype(np.float64) for a in case.args)
    message = _explained(case, _relu(x @ w1 @ w2))
    assert "relu(x @ w1 @ w2)" in message
    assert "after the psum" in message


def test_other_wrong_answers_get_no_explanation():
    case = _case(16, 3, 32, 2, seed=8)
    message = _explained(case, PROBLEM.expected(case) + 1.0)
    assert message.startswith("values:")
    assert message.count(". ") == 0
