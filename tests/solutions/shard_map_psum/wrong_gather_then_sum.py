"""Mistake: all_gather the whole array onto every device, then sum it there: a gather where one all-reduce of a scalar is asked."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no all-reduce (psum, pmean)"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def shard_map_psum(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    if x.shape[0] == 0:
        return jax.device_put(jnp.sum(x), NamedSharding(mesh, P()))
    return jax.jit(
        jax.shard_map(
            lambda block: jnp.sum(jax.lax.all_gather(block, "data", tiled=True, to="invarying")),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P(),
        )
    )(x)
