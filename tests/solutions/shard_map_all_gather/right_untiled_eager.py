"""Eager style: untiled all_gather (a stack of blocks) flattened to the whole vector; shard_map called directly."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    """The outer product of a vector with itself: all_gather gives each device the whole vector."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    if x.shape[0] == 0:
        empty = jnp.zeros((0, 0), dtype=x.dtype)
        return jax.device_put(empty, NamedSharding(mesh, P("data", None)))

    def body(block):
        stacked = jax.lax.all_gather(block, "data")  # (devices, block length)
        whole = stacked.reshape(-1)
        return jnp.outer(block, whole)

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data", None))(x)
