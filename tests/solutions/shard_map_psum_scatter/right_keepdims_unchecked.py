"""check_vma=False style: (1, n) partial sums (keepdims) scattered along axis 1, tiled, then flattened; jitted."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_programs = {}


def _body(rows):
    partial_sums = jnp.sum(rows, axis=0, keepdims=True)  # (1, n)
    mine = jax.lax.psum_scatter(partial_sums, "data", scatter_dimension=1, tiled=True)  # (1, n / d)
    return mine.reshape(-1)


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    """Column sums of a batch: psum_scatter adds the devices' partial sums, split over them."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"x has no rows or no columns: shape {x.shape}")
    mesh = data_mesh(math.gcd(x.shape[0], x.shape[1]))
    if mesh not in _programs:
        _programs[mesh] = jax.jit(
            jax.shard_map(_body, mesh=mesh, in_specs=P("data"), out_specs=P("data"), check_vma=False)
        )
    return _programs[mesh](jax.device_put(x, NamedSharding(mesh, P("data"))))
