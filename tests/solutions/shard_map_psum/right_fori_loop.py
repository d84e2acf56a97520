"""Loop style: each device sums its block with jax.lax.fori_loop (accumulator in jnp.sum's dtype), then one psum; jitted."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _block_total(block):
    dtype = jnp.sum(block[:0]).dtype  # the dtype jnp.sum gives (int8 -> int32, bfloat16 stays)
    # accumulate low-precision floats in float32, as jnp.sum does, then round once
    acc_dtype = jnp.promote_types(dtype, jnp.float32) if jnp.issubdtype(dtype, jnp.inexact) else dtype
    zero = jnp.sum(block[:0], dtype=acc_dtype)  # a 0 that varies over "data", like the loop's sum
    if block.shape[0] == 0:
        return zero.astype(dtype)
    total = jax.lax.fori_loop(0, block.shape[0], lambda i, acc: acc + block[i].astype(acc_dtype), zero)
    return total.astype(dtype)


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
    return jax.jit(
        jax.shard_map(
            lambda block: jax.lax.psum(_block_total(block), "data"),
            mesh=mesh,
            in_specs=P("data"),
            out_specs=P(),
        )
    )(x)
