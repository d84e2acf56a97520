"""Mistake: the shard_map body all-gathers every row, applies the vmapped function to all of them, keeps its own: communication the problem rules out."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no communication"
DEVICES = (8,)


def shard_map_vs_vmap(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    f = jax.vmap(lambda r: jnp.sum(r**2))

    def body(rows):
        every_row = jax.lax.all_gather(rows, "data", tiled=True)  # wrong: not needed
        me = jax.lax.axis_index("data")
        return jax.lax.dynamic_slice_in_dim(f(every_row), me * rows.shape[0], rows.shape[0])

    if x.shape[0] == 0 or x.shape[1] == 0:
        body = f
    per_device = jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    return jax.jit(lambda x: jnp.stack([per_device(x), f(x)]))(x)
