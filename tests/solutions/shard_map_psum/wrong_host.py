"""Shortcut: summed on the host with NumPy (in jnp.sum's dtype), then replicated over the mesh."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "with NumPy or Python"
DEVICES = (1, 8)


def shard_map_psum(x: jax.Array) -> jax.Array:
    host = np.asarray(x)
    dtype = jnp.sum(jnp.zeros(0, host.dtype)).dtype
    total = np.asarray(host.astype(np.float64 if np.issubdtype(dtype, np.floating) else host.dtype).sum()).astype(dtype)
    return jax.device_put(total, NamedSharding(data_mesh(host.shape[0]), P()))
