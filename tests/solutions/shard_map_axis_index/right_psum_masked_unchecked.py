"""check_vma=False style: psum of a vector whose entry j is this device's total if it comes before device j; entry axis_index is the offset."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_programs = {}


def _body(block):
    local = jnp.cumsum(block)
    n = jax.lax.axis_size("data")
    me = jax.lax.axis_index("data")
    total = jnp.sum(block, dtype=local.dtype)
    # entry j: my total if I come before device j, else 0
    contribution = jnp.where(me < jnp.arange(n), total, jnp.zeros((), local.dtype))
    offsets = jax.lax.psum(contribution, "data")  # entry j: the totals before device j
    return local + offsets[me]


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    """Cumulative sum: each device offsets its block's by the blocks before it, found with axis_index."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    if mesh not in _programs:
        _programs[mesh] = jax.jit(
            jax.shard_map(_body, mesh=mesh, in_specs=P("data"), out_specs=P("data"), check_vma=False)
        )
    return _programs[mesh](jax.device_put(x, NamedSharding(mesh, P("data"))))
