"""Eager style: shard_map called directly, no jax.jit."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_pmean(x: jax.Array) -> jax.Array:
    """Centre a 1-D array on its mean: pmean turns each block's mean into the global mean."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array, not {type(x).__name__}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must hold floating-point numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    if x.size == 0:
        raise ValueError("an empty array has no mean")
    mesh = data_mesh(len(x))
    x = jax.device_put(x, NamedSharding(mesh, P("data")))

    def body(block):
        return block - jax.lax.pmean(block.mean(), "data")

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
