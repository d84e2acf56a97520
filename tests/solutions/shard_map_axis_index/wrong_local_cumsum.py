"""Mistake: the local cumulative sum alone; each block starts again from 0 (right on one device only)."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "its own cumulative sum, starting from 0"
DEVICES = (8,)


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return jax.shard_map(jnp.cumsum, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
