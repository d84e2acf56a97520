"""Mistake: the psum is there but multiplied by 0, so each device returns its own partial sum (check_vma=False)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "one device's partial sum"
DEVICES = (8,)


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        partial_sum = jnp.sum(block)
        return partial_sum + 0 * jax.lax.psum(partial_sum, "data")  # wrong: the total is discarded

    return jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P(), check_vma=False)
    )(x)
