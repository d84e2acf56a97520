"""Eager style: jax.shard_map called directly, no jax.jit; a fresh shard_map each call."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_double(x: jax.Array) -> jax.Array:
    """Double every element of a 1-D array, each device doubling its own block."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if not (jnp.issubdtype(x.dtype, jnp.integer) or jnp.issubdtype(x.dtype, jnp.inexact)):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    if isinstance(x, jax.core.Tracer):
        mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names)  # Auto axes when traced
    else:
        x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def double_block(block):
        return block * 2.0

    return jax.shard_map(double_block, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
