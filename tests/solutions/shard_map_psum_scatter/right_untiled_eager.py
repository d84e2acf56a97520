"""Eager style: the partial sums reshaped to (devices, n / devices), untiled psum_scatter over that leading axis; shard_map called directly."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    """Column sums of a batch: psum_scatter adds the devices' partial sums, split over them."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be a numeric array, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must be a numeric array, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    batch, n = x.shape
    if batch == 0 or n == 0:
        raise ValueError(f"x must have rows and columns, but has shape {x.shape}")
    mesh = data_mesh(math.gcd(batch, n))
    d = mesh.shape["data"]
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))

    def body(rows):
        partial_sums = rows.sum(axis=0).reshape(d, n // d)  # block j of the partial sums in row j
        return jax.lax.psum_scatter(partial_sums, "data", scatter_dimension=0, tiled=False)

    return jax.shard_map(body, mesh=mesh, in_specs=P("data", None), out_specs=P("data"))(x)
