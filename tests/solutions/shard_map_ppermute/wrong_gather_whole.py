"""Mistake: all_gather the whole array and roll it on every device, keeping this device's slice: the whole array moves where two edge elements suffice."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no collective-permute (ppermute)"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        whole = jax.lax.all_gather(block, "data", tiled=True)
        smooth = (jnp.roll(whole, 1) + whole + jnp.roll(whole, -1)) / 3
        me = jax.lax.axis_index("data")
        return jax.lax.dynamic_slice_in_dim(smooth, me * block.shape[0], block.shape[0])

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
