"""Eager style: shard_map and vmap called directly on the placed input, no jax.jit, stacked with jnp.stack."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def shard_map_vs_vmap(x: jax.Array) -> jax.Array:
    """Per-row sums of squares computed by shard_map and by vmap, stacked."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D, but has shape {x.shape}")
    mesh = data_mesh(x.shape[0])
    if isinstance(x, jax.core.Tracer):
        mesh = jax.sharding.Mesh(mesh.devices, mesh.axis_names)
    else:
        x = jax.device_put(x, NamedSharding(mesh, P("data")))
    f = lambda r: jnp.sum(r**2)  # noqa: E731
    by_devices = jax.shard_map(jax.vmap(f), mesh=mesh, in_specs=P("data"), out_specs=P("data"))(x)
    by_rows = jax.vmap(f)(x)
    return jnp.stack([by_devices, by_rows])
