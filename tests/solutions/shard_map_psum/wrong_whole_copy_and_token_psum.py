"""Mistake: x put whole on every device, each sums it alone, and a psum whose result cannot change the answer (min(|total|, 0) is 0) stands in for the collective."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "never reaches the answer"
DEVICES = (8,)


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    blocks = jax.device_put(x, NamedSharding(mesh, P("data")))
    whole = jax.device_put(x, NamedSharding(mesh, P()))  # wrong: every device gets all of x

    def body(block, everything):
        token = jax.lax.psum(jnp.sum(block), "data")
        return jnp.sum(everything) + jnp.minimum(jnp.abs(token), 0)  # the psum adds nothing

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("data"), P()), out_specs=P()))(
        blocks, whole
    )
