"""Shortcut: np.cumsum on the host, then placed on the mesh."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "with NumPy or Python"
DEVICES = (1, 8)


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    host = np.asarray(x)
    dtype = jnp.cumsum(jnp.zeros(0, host.dtype)).dtype
    result = np.cumsum(host, dtype=np.float64 if np.issubdtype(dtype, np.floating) else None).astype(dtype)
    return jax.device_put(result, NamedSharding(data_mesh(host.shape[0]), P("data")))
