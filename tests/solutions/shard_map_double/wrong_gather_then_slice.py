"""Mistake: every device all-gathers the whole array, doubles it, and keeps its own slice: communication the problem does not need."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "needs no communication"
DEVICES = (8,)


def shard_map_double(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        whole = jax.lax.all_gather(block, "data", tiled=True)  # wrong: not needed
        me = jax.lax.axis_index("data")
        return jax.lax.dynamic_slice_in_dim(whole * 2.0, me * block.shape[0], block.shape[0])

    if x.shape[0] == 0:
        return jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
