"""check_vma=False style: psum of a 1-element partial sum (keepdims), reshaped to a scalar; legal since psum makes it replicated."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_cache = {}


def shard_map_psum(x: jax.Array) -> jax.Array:
    """Sum a 1-D array: each device sums its block, then psum adds the partial sums."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    traced = isinstance(x, jax.core.Tracer)
    mesh = data_mesh(x.shape[0])
    if traced:
        mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names)
    if mesh not in _cache:
        def body(block):
            return jax.lax.psum(jnp.sum(block, keepdims=True), "data").reshape(())

        _cache[mesh] = jax.jit(
            jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P(), check_vma=False)
        )
    if not traced:
        x = jax.device_put(x, NamedSharding(mesh, P("data")))
    return _cache[mesh](x)
