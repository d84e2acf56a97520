"""Every reference on the inputs a reader may pass: any numeric dtype, any layout, odd values.

Good inputs give the oracle's answer (``assert_matches_oracle``: its shape, the dtype
JAX's own jnp function gives, values within the dtype's rounding); bad ones a
TypeError or ValueError that names the argument. Run at 1 and 8 devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import (
    PROBLEMS,
    data_mesh,
    data_parallel_forward,
    shard_map_double,
    shard_map_psum,
    shard_map_simulate,
    shard_map_vs_vmap,
)
from shard_tutorial.problem import Case

ONE_ARRAY = ["shard_map_double", "shard_map_psum", "shard_map_vs_vmap"]
DTYPES = [
    np.int8,
    np.uint8,
    np.int16,
    np.int32,
    np.uint32,
    np.float16,
    jnp.bfloat16,
    np.float32,
    np.complex64,
    jnp.float8_e4m3fn,
    jnp.float8_e5m2,
]


def _shape(name: str, length: int) -> tuple[int, ...]:
    return (length, 3) if name == "shard_map_vs_vmap" else (length,)


def _values(dtype: type, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Small whole numbers for integer and float8 dtypes (sums stay exact), normals else."""
    rng = np.random.default_rng(seed)
    if jnp.issubdtype(dtype, jnp.integer) or jnp.finfo(dtype).bits == 8:
        low = 0 if jnp.issubdtype(dtype, jnp.unsignedinteger) else -6
        return rng.integers(low, 7, size=shape).astype(dtype)
    values = rng.normal(size=shape)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        values = values + 1j * rng.normal(size=shape)
    return values.astype(dtype)


# 8 examples per problem: each (dtype, length) pair compiles once; together they cover
# the integer, float (bfloat16, float16, float8) and complex kinds at lengths 0-17.
@pytest.mark.parametrize("name", ONE_ARRAY)
@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(DTYPES), length=st.integers(0, 17), seed=st.integers(0, 2**16))
def test_every_numeric_dtype_matches_the_oracle(name, dtype, length, seed, assert_matches_oracle):
    problem = PROBLEMS[name]
    case = Case(f"{np.dtype(dtype)}[{length}]", (_values(dtype, _shape(name, length), seed),))
    assert_matches_oracle(problem, case, problem.reference(*case.jax_args()))


@pytest.mark.parametrize("dtype", [np.int32, np.float16, jnp.bfloat16, np.float32])
def test_the_simulation_takes_any_numeric_input(dtype, assert_matches_oracle):
    problem = PROBLEMS["shard_map_simulate"]
    case = Case(str(np.dtype(dtype)), (3.0, _values(dtype, (6, 4), 0), 3.0, 2.0))
    out = problem.reference(*case.jax_args())
    assert out.dtype == jnp.float32  # nnx.Linear's float32 parameters set the dtype
    assert_matches_oracle(problem, case, out)


@pytest.mark.parametrize("name", ONE_ARRAY)
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
def test_nan_and_infinity_propagate_as_in_numpy(name, dtype, assert_matches_oracle):
    problem = PROBLEMS[name]
    special = np.array([1.0, np.nan, np.inf, -np.inf, 2.0, 0.0, -1.0, 3.0])
    for values in (special, special[2:4], special[[0, 2, 4]], special[[1, 5]]):
        x = values.astype(dtype) if name != "shard_map_vs_vmap" else values.astype(dtype)[:, None]
        case = Case(f"{values}", (x,))
        assert_matches_oracle(problem, case, problem.reference(*case.jax_args()))


def test_nan_and_infinity_in_the_psum_follow_ieee():
    assert np.isnan(shard_map_psum(jnp.array([1.0, np.inf, -np.inf, 2.0])))
    assert shard_map_psum(jnp.array([1.0, np.inf] * 4)) == np.inf
    assert np.isnan(shard_map_psum(jnp.array([np.nan] + [1.0] * 7)))


@pytest.mark.parametrize("name", ONE_ARRAY)
def test_a_very_long_input(name, assert_matches_oracle):
    problem = PROBLEMS[name]
    rng = np.random.default_rng(22)
    shape = (2**20, 4) if name == "shard_map_vs_vmap" else (2**22,)
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    case = Case("2**22 elements", (x,))
    if name == "shard_map_psum":
        total = shard_map_psum(jnp.asarray(x))
        # float32 rounding of a sum of 2**22 terms, in whatever order the devices add them.
        np.testing.assert_allclose(total, np.sum(x, dtype=np.float64), rtol=1e-5, atol=0.5)
    else:
        assert_matches_oracle(problem, case, problem.reference(*case.jax_args()))


def _layouts(x: np.ndarray) -> dict[str, object]:
    read_only = x.copy()
    read_only.setflags(write=False)
    doubled = np.repeat(x, 2, axis=0)
    return {
        "read-only": read_only,
        "every other element": doubled[::2],
        "reversed": x[::-1].copy()[::-1],
        "Fortran order": np.asfortranarray(x),
        "on the last device": jax.device_put(x, jax.devices()[-1]),
        "split over 2 devices": jax.device_put(x, NamedSharding(data_mesh(2), P("data"))),
        "replicated on a mesh": jax.device_put(x, NamedSharding(data_mesh(8), P())),
    }


@pytest.mark.parametrize("name", ONE_ARRAY)
def test_any_layout_and_placement_gives_the_same_answer(name, assert_matches_oracle):
    problem = PROBLEMS[name]
    x = _values(np.float32, _shape(name, 16), 5)
    for label, arg in _layouts(x).items():
        out = problem.reference(arg)
        assert_matches_oracle(problem, Case(label, (x,)), out)


def test_data_parallel_forward_takes_any_layout():
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    x = _values(np.float32, (16, 3), 6)
    for label, arg in _layouts(x).items():
        np.testing.assert_allclose(
            data_parallel_forward(model, arg),
            model(jnp.asarray(x)),
            rtol=1e-5,
            atol=1e-6,
            err_msg=label,
        )


@pytest.mark.parametrize(
    "function",
    [
        shard_map_double,
        shard_map_psum,
        shard_map_vs_vmap,
        lambda x: data_parallel_forward(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), x),
        lambda x: shard_map_simulate(0.0, x, 1.0, 1.0),
    ],
    ids=["double", "psum", "vs_vmap", "data_parallel_forward", "simulate"],
)
@pytest.mark.parametrize(
    ("x", "words"),
    [
        (3.0, ["x must be a", "array", "got float: 3.0", "jnp.asarray(x)"]),
        (3, ["x must be a", "got int: 3"]),
        (1 + 2j, ["x must be a", "got complex"]),
        ([[1.0]], ["x must be a", "got list"]),
    ],
)
def test_python_numbers_and_lists_are_refused_naming_x(function, x, words):
    with pytest.raises(TypeError) as info:
        function(x)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda: shard_map_double(jnp.array([True, False])),
        lambda: shard_map_psum(np.array([True])),
        lambda: shard_map_vs_vmap(jnp.ones((2, 2), bool)),
        lambda: data_parallel_forward(nnx.Linear(2, 1, rngs=nnx.Rngs(0)), jnp.ones((2, 2), bool)),
        lambda: shard_map_simulate(0.0, jnp.ones((2, 2), bool), 1.0, 1.0),
    ],
)
def test_booleans_are_refused_naming_the_dtype(call):
    with pytest.raises(TypeError, match=r"^x must hold numbers .*got dtype bool$"):
        call()


@pytest.mark.parametrize("name", ONE_ARRAY)
@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.int32])
def test_64_bit_mode_gives_the_dtype_jnp_gives(name, dtype, assert_matches_oracle):
    problem = PROBLEMS[name]
    x = _values(dtype, _shape(name, 12), 7)
    with jax.enable_x64(True):
        case = Case(f"x64 {np.dtype(dtype)}", (x,))
        out = problem.reference(jnp.asarray(x))
        assert out.dtype == problem.unsharded(jnp.asarray(x)).dtype  # jnp's own rule
        assert out.dtype == problem.expected(case).dtype
        if dtype is np.int64:
            assert out.dtype in (jnp.int64, jnp.float64)  # no silent narrowing to 32 bits
        assert_matches_oracle(problem, case, out)
    # And the same input without 64-bit mode: JAX stores int64 as int32, float64 as float32.
    case = Case(f"x32 {np.dtype(dtype)}", (x,))
    out = problem.reference(jnp.asarray(x))
    assert out.dtype == problem.expected(case).dtype
    assert jnp.dtype(out.dtype).itemsize <= 4
    assert_matches_oracle(problem, case, out)
