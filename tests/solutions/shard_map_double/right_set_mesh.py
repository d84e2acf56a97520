"""Mesh-context style: jax.set_mesh supplies the mesh, shard_map gets no mesh= argument; constant passed as an argument."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _scale(block, factor):
    return block * factor


def shard_map_double(x: jax.Array) -> jax.Array:
    """Double every element of a 1-D array, each device doubling its own block."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    if isinstance(x, jax.core.Tracer):
        # Traced by jit/grad/vmap: an Auto mesh, passed explicitly (set_mesh refuses in a trace).
        auto = jax.sharding.Mesh(mesh.devices, mesh.axis_names)
        return jax.shard_map(
            lambda b: _scale(b, 2.0), mesh=auto, in_specs=P("data"), out_specs=P("data")
        )(x)
    x = jax.device_put(x, NamedSharding(mesh, P("data")))
    with jax.set_mesh(mesh):
        # the factor is a Python float closed over by the lambda: a weak-typed constant
        return jax.jit(
            jax.shard_map(lambda b: _scale(b, 2.0), in_specs=P("data"), out_specs=P("data"))
        )(x)
