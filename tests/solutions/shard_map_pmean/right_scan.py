"""Loop style: each device sums its block with jax.lax.scan (float32 accumulator), divides by the block length, then pmean; jitted."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _centre(block):
    acc_dtype = jnp.promote_types(block.dtype, jnp.float32)
    zero = jnp.sum(block[:0], dtype=acc_dtype)  # varies over "data", like the carry will
    total, _ = jax.lax.scan(lambda acc, v: (acc + v.astype(acc_dtype), None), zero, block)
    block_mean = total / block.shape[0]
    global_mean = jax.lax.pmean(block_mean, "data")
    return block - global_mean.astype(block.dtype)


def shard_map_pmean(x: jax.Array) -> jax.Array:
    """Centre a 1-D array on its mean: pmean turns each block's mean into the global mean."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array, not {type(x).__name__}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"x must hold floating-point numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("x is empty: an empty array has no mean")
    mesh = data_mesh(x.shape[0])
    centre = jax.jit(jax.shard_map(_centre, mesh=mesh, in_specs=P("data"), out_specs=P("data")))
    return centre(jax.device_put(x, NamedSharding(mesh, P("data"))))
