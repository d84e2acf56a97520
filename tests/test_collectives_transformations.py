"""Part II's references under jax.jit, jax.grad and jax.vmap, against their plain-jnp twins.

Each reference is compared with its problem's ``unsharded`` twin (one device, no
mesh). Run at 1 and 8 devices (``--devices``); the shapes below split over all 8,
over fewer (6 or 5 of 8) and over one device. Under ``jax.vmap`` each example has
the shape below, so the mesh fits one example, as ``data_mesh_for`` says.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from shard_tutorial import PROBLEMS

# Each problem's one argument: 1-D for most, 2-D for the two that split a matrix.
SHAPES = {
    "shard_map_pmean": [(16,), (12,), (5,), (1,)],
    "shard_map_all_gather": [(16,), (12,), (5,)],
    "shard_map_ppermute": [(16,), (12,), (5,)],
    "shard_map_psum_scatter": [(16, 8), (12, 6), (5, 3)],
    "shard_map_all_to_all": [(16, 8), (12, 6), (5, 3)],
    "shard_map_axis_index": [(16,), (12,), (5,)],
}
# On one device (--devices 1) every shape above is split over that one device, so
# each problem's first shape stands for them all there.
PARAMS = [
    pytest.param(name, shape, id=f"{name}-{'x'.join(map(str, shape))}")
    for name, shapes in SHAPES.items()
    for shape in (shapes if jax.device_count() > 1 else shapes[:1])
]


def _input(shape: tuple[int, ...]) -> jax.Array:
    return jnp.asarray(
        np.random.default_rng(len(shape) * 100 + shape[0]).normal(size=shape), jnp.float32
    )


def test_every_part_ii_problem_is_covered():
    assert set(SHAPES) == {name for name, p in PROBLEMS.items() if p.folder == "collectives"}


@pytest.mark.parametrize(("name", "shape"), PARAMS)
def test_jit_gives_the_eager_result(name, shape):
    reference, x = PROBLEMS[name].reference, _input(shape)
    np.testing.assert_allclose(jax.jit(reference)(x), reference(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "shape"), PARAMS)
def test_grad_equals_the_unsharded_functions_grad(name, shape):
    problem, x = PROBLEMS[name], _input(shape)

    def loss(f):
        return lambda x: jnp.sum(jnp.sin(f(x)))  # a non-linear read of every output element

    np.testing.assert_allclose(
        jax.grad(loss(problem.reference))(x),
        jax.grad(loss(problem.unsharded))(x),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(("name", "shape"), PARAMS)
def test_vmap_over_a_leading_axis_maps_each_example(name, shape):
    problem = PROBLEMS[name]
    batch = jnp.stack([_input(shape), 2 * _input(shape), -_input(shape)])
    np.testing.assert_allclose(
        jax.vmap(problem.reference)(batch),
        jax.vmap(problem.unsharded)(batch),
        rtol=1e-5,
        atol=1e-5,
    )
