"""Eager style: transpose the block first, then all_to_all splitting its rows and concatenating along the columns; shard_map called directly."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_all_to_all(x: jax.Array) -> jax.Array:
    """Transpose a matrix whose rows are split: all_to_all swaps which axis is split."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    n, m = x.shape
    mesh = data_mesh(math.gcd(n, m))
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    if x.size == 0:
        return jax.device_put(jnp.zeros((m, n), x.dtype), NamedSharding(mesh, P("data", None)))

    def body(rows):  # (n/d, m)
        local_t = rows.T  # (m, n/d): piece j (rows j*m/d ...) belongs to device j
        return jax.lax.all_to_all(local_t, "data", split_axis=0, concat_axis=1, tiled=True)  # (m/d, n)

    return jax.shard_map(body, mesh=mesh, in_specs=P("data", None), out_specs=P("data", None))(x)
