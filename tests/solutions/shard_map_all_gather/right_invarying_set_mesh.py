"""Mesh-context style: under jax.set_mesh, all_gather(to="invarying") (the gathered vector typed replicated), jitted shard_map without mesh=."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _body(block):
    whole = jax.lax.all_gather(block, "data", tiled=True, to="invarying")
    return jnp.multiply(block[:, None], whole[None, :])


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    """The outer product of a vector with itself: all_gather gives each device the whole vector."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    with jax.set_mesh(mesh):
        x = jax.device_put(x, P("data"))
        if x.shape[0] == 0:
            return jax.device_put(jnp.zeros((0, 0), x.dtype), P("data"))
        return jax.jit(jax.shard_map(_body, in_specs=P("data"), out_specs=P("data")))(x)
