"""Mistake: gather-then-slice: all_gather the whole array, cumsum it on every device, keep this device's slice via axis_index."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "all-gather"
DEVICES = (8,)


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        whole = jax.lax.all_gather(block, "data", tiled=True)
        me = jax.lax.axis_index("data")
        return jax.lax.dynamic_slice_in_dim(jnp.cumsum(whole), me * block.shape[0], block.shape[0])

    if x.shape[0] == 0:
        return jax.shard_map(jnp.cumsum, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
