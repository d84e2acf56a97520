"""Mistake: every device computes the whole n x n product from the gathered vector and returns it replicated (out_specs=P()), where the rows should be split."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "placement"
PHRASE = "every device holds the whole result"
DEVICES = (8,)


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    n = x.shape[0]
    mesh = data_mesh(n)
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    if n == 0:
        return jax.device_put(jnp.zeros((0, 0), x.dtype), NamedSharding(mesh, P()))

    def body(block):
        whole = jax.lax.all_gather(block, "data", tiled=True, to="invarying")
        return whole[:, None] * whole[None, :]  # wrong: all n rows on every device

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P()))(x)
