"""Log-step scan with ppermute (Hillis-Steele): cyclic shifts of 1, 2, 4... places; axis_index drops what wrapped around. Python loop, jitted."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _offsets(block):
    local = jnp.cumsum(block)
    total = jnp.sum(block, dtype=local.dtype)
    n = jax.lax.axis_size("data")
    me = jax.lax.axis_index("data")
    running = total  # sum of the totals of devices me - shift + 1 .. me
    shift = 1
    while shift < n:
        cyclic = [(i, (i + shift) % n) for i in range(n)]
        received = jax.lax.ppermute(running, "data", perm=cyclic)
        running = running + jnp.where(me >= shift, received, jnp.zeros_like(received))
        shift *= 2
    return local + (running - total)


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    """Cumulative sum: each device offsets its block's by the blocks before it, found with axis_index."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    program = jax.jit(jax.shard_map(_offsets, mesh=mesh, in_specs=P("data"), out_specs=P("data")))
    return program(jax.device_put(x, NamedSharding(mesh, P("data"))))
