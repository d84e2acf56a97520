"""Wrong collective: the whole vector assembled with a psum of zero-padded blocks (placed at axis_index), where all_gather is asked."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no all-gather (all_gather)"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    n = x.shape[0]
    mesh = data_mesh(n)
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    if n == 0:
        return jax.device_put(jnp.zeros((0, 0), x.dtype), NamedSharding(mesh, P("data")))

    def body(block):
        me = jax.lax.axis_index("data")
        padded = jax.lax.dynamic_update_slice_in_dim(jnp.zeros(n, block.dtype), block, me * block.shape[0], 0)
        whole = jax.lax.psum(padded, "data")  # wrong collective: an all-reduce of n elements
        return block[:, None] * whole[None, :]

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(x)
