"""Constant as an argument: the factor 2 goes into the jitted shard_map as a replicated jax Array (in_specs P()), in the dtype x * 2.0 has."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _scale(block, factor):
    return block.astype(factor.dtype) * factor


def shard_map_double(x: jax.Array) -> jax.Array:
    """Double every element of a 1-D array, each device doubling its own block."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    out_dtype = jax.eval_shape(lambda v: v * 2.0, jax.ShapeDtypeStruct((), x.dtype)).dtype
    mesh = data_mesh(x.shape[0])
    if isinstance(x, jax.core.Tracer):
        mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names)
        factor = jnp.asarray(2, out_dtype)
    else:
        x = jax.device_put(x, NamedSharding(mesh, P("data")))
        factor = jax.device_put(jnp.asarray(2, out_dtype), NamedSharding(mesh, P()))
    doubled = jax.jit(
        jax.shard_map(_scale, mesh=mesh, in_specs=(P("data"), P()), out_specs=P("data"))
    )
    return doubled(x, factor)
