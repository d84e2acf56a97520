"""Eager style: shard_map called directly (no jax.jit), psum by keyword axis_name."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_psum(x: jax.Array) -> jax.Array:
    """Sum a 1-D array: each device sums its block, then psum adds the partial sums."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    if isinstance(x, jax.core.Tracer):
        mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names)
    else:
        x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        partial_sum = block.sum()
        return jax.lax.psum(partial_sum, axis_name="data")

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P())(x)
