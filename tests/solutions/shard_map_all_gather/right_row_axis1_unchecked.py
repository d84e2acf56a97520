"""check_vma=False style: the block as a (1, b) row, gathered along axis 1 (tiled) into the (1, n) whole vector; jitted."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_programs = {}


def _body(block):
    row = block[None, :]  # (1, b)
    whole_row = jax.lax.all_gather(row, "data", axis=1, tiled=True)  # (1, n)
    return block[:, None] * whole_row


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    """The outer product of a vector with itself: all_gather gives each device the whole vector."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    placed = jax.device_put(x, NamedSharding(mesh, P("data")))
    if x.shape[0] == 0:
        return jax.device_put(jnp.zeros((0, 0), placed.dtype), NamedSharding(mesh, P("data")))
    if mesh not in _programs:
        _programs[mesh] = jax.jit(
            jax.shard_map(_body, mesh=mesh, in_specs=P("data"), out_specs=P("data"), check_vma=False)
        )
    return _programs[mesh](placed)
