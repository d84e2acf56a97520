"""Shortcut: both rows from vmap on the placed input (computation follows data), no shard_map at all."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "not with jax.shard_map"
DEVICES = (1, 8)


def shard_map_vs_vmap(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    f = jax.vmap(lambda r: jnp.sum(r**2))
    return jax.jit(lambda x: jnp.stack([f(x), f(x)]))(x)  # wrong: no shard_map path
