"""JAX's reduced and unreduced types, as the page "Gradients across devices" teaches them.

The page runs on the newest jax only (the docs build); these hold its claims on every
stack the suite runs on, including what jax 0.10.2 says where 0.12 says otherwise (the
page quotes both), so an upgrade or a downgrade that changes them fails here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.compiled import collectives

OLD_JAX = jax.__version__.startswith("0.10.")


def mse(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


@pytest.fixture(scope="module")
def setup():
    """A mesh of 8 devices, an 8-feature model, its batch placed, and its gradient."""
    if jax.device_count() < 8:
        # The page's mesh. (On a mesh of 1 device, jax 0.10.2 and 0.12.0.1 both fail
        # inside shard_map's lowering when an unreduced value is returned: "Expected last
        # op to be sdy.sharding_constraint", and keep a reduce-scatter over 1 device.)
        pytest.skip("the page's claims are about a mesh of 8 devices")
    mesh = jax.make_mesh((8,), ("data",))
    x = jnp.arange(128.0).reshape(16, 8)
    y = jnp.arange(16.0)
    w = jnp.zeros(8)
    batch = (
        jax.device_put(w, NamedSharding(mesh, P())),
        jax.device_put(x, NamedSharding(mesh, P("data"))),
        jax.device_put(y, NamedSharding(mesh, P("data"))),
    )
    return mesh, batch, jax.grad(mse)(w, x, y)


def on_devices(mesh, body, out_specs):
    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=out_specs)
    )


def deferred_gradient(w, x, y):
    w_reduced = jax.lax.pcast(w, "data", to="reduced")
    return jax.grad(lambda w: jax.lax.pmean(mse(w, x, y), "data"))(w_reduced)


def test_the_gradient_of_a_reduced_cast_is_unreduced_and_costs_no_collective(setup):
    mesh, batch, whole = setup
    seen = {}

    def body(w, x, y):
        seen["cast"] = str(jax.typeof(jax.lax.pcast(w, "data", to="reduced")))
        grad = deferred_gradient(w, x, y)
        seen["grad"] = str(jax.typeof(grad))
        return grad

    program = on_devices(mesh, body, P(unreduced={"data"}))
    grad = program(*batch)
    assert seen == {"cast": "float32[8]{R:data}", "grad": "float32[8]{U:data}"}
    assert str(jax.typeof(grad)) == "float32[8]{U:data}"
    assert collectives(program, *batch) == []
    pieces = [np.asarray(shard.data) for shard in grad.addressable_shards]
    np.testing.assert_allclose(sum(pieces), whole)
    kind = "" if OLD_JAX else ", unreduced_kind=sum"
    assert str(grad.sharding.spec) == f"P(None, unreduced={{'data'}}{kind})"


def test_only_linear_operations_accept_an_unreduced_value(setup):
    mesh, batch, _ = setup

    def applying(op):
        return on_devices(
            mesh, lambda w, x, y: op(w, deferred_gradient(w, x, y)), P(unreduced={"data"})
        )

    assert str(jax.typeof(applying(lambda _, g: g + g)(*batch))) == "float32[8]{U:data}"
    # ShardingTypeError is not public (jax._src.core): recognised by its name.
    if OLD_JAX:  # the page quotes this one
        name, message = "NotImplementedError", "unreduced rule for cos is not implemented."
    else:
        name, message = "ShardingTypeError", "cos is a non-linear operation"
    with pytest.raises(Exception, match=message) as raised:
        applying(lambda _, g: jnp.cos(g))(*batch)
    assert type(raised.value).__name__ == name
    with pytest.raises(
        Exception, match="LHS should be reduced along the same axes RHS is unreduced on"
    ) as raised:
        applying(lambda w, g: w - 0.1 * g)(*batch)
    assert type(raised.value).__name__ == "ShardingTypeError"


def test_unreduced_kind_is_newer_than_jax_0_10():
    assert hasattr(jax.sharding, "UnreducedKind") is not OLD_JAX


def test_psum_scatter_of_the_deferred_sum_is_a_reduce_scatter(setup):
    mesh, batch, whole = setup

    def scattered(w, x, y):
        return jax.lax.psum_scatter(deferred_gradient(w, x, y), "data", tiled=True)

    def summed_then_sliced(w, x, y):
        grad = jax.grad(lambda w: jax.lax.pmean(mse(w, x, y), "data"))(w)
        return jax.lax.dynamic_slice_in_dim(grad, jax.lax.axis_index("data"), 1)

    for body, kind in [(scattered, "reduce-scatter"), (summed_then_sliced, "all-reduce")]:
        program = on_devices(mesh, body, P("data"))
        np.testing.assert_allclose(program(*batch), whole, rtol=1e-6)
        found = collectives(program, *batch)
        assert [c.kind for c in found] == [kind]
        # A reduce-scatter leaves each device 1 of the 8 float32 values; an all-reduce, 8.
        assert found[0].nbytes == (4 if kind == "reduce-scatter" else 32)
