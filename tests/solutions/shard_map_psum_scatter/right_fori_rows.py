"""Loop style: each device adds its rows one by one in a jax.lax.fori_loop (in the dtype of x.sum), then one tiled psum_scatter; jitted under jax.set_mesh."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _body(rows):
    dtype = jnp.sum(rows[:0], axis=0).dtype  # the dtype x.sum(axis=0) gives
    acc_dtype = jnp.promote_types(dtype, jnp.float32) if jnp.issubdtype(dtype, jnp.inexact) else dtype
    zero = jnp.sum(rows[:0], axis=0, dtype=acc_dtype)  # (n,) zeros, varying over "data"
    partial_sums = jax.lax.fori_loop(
        0, rows.shape[0], lambda i, acc: acc + rows[i].astype(acc_dtype), zero
    ).astype(dtype)
    return jax.lax.psum_scatter(partial_sums, "data", tiled=True)


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    """Column sums of a batch: psum_scatter adds the devices' partial sums, split over them."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must have rows and columns, but has shape {x.shape}")
    mesh = data_mesh(math.gcd(*x.shape))
    with jax.set_mesh(mesh):
        x = jax.device_put(x, P("data"))
        return jax.jit(jax.shard_map(_body, in_specs=P("data"), out_specs=P("data")))(x)
