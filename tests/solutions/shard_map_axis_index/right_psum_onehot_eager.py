"""Eager style, psum variant: each device psums a one-hot vector holding its total at axis_index, then adds the entries before it."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    """Cumulative sum: each device offsets its block's by the blocks before it, found with axis_index."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    devices = mesh.shape["data"]
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        local = jnp.cumsum(block)
        me = jax.lax.axis_index("data")
        total = jnp.sum(block, dtype=local.dtype)
        one_hot = jnp.where(jnp.arange(devices) == me, total, jnp.zeros((), local.dtype))
        totals = jax.lax.psum(one_hot, "data")  # every device's total, in device order
        offset = jnp.sum(jnp.where(jnp.arange(devices) < me, totals, 0), dtype=local.dtype)
        return local + offset

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
