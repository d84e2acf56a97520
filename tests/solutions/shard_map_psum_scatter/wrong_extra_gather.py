"""Mistake: the reduce-scatter is there, but the block is then all-gathered back to every device before keeping it: more bytes than the one reduce-scatter."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "where reduce-scatter (psum_scatter) was asked"
DEVICES = (8,)


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    mesh = data_mesh(math.gcd(*x.shape))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(rows):
        mine = jax.lax.psum_scatter(rows.sum(axis=0), "data", tiled=True)
        every = jax.lax.all_gather(mine, "data", tiled=True)  # wrong: needless second collective
        width = mine.shape[0]
        return jax.lax.dynamic_slice_in_dim(every, jax.lax.axis_index("data") * width, width)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
