"""Shortcut: the periodic average computed on the host with np.roll, then placed on the mesh."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "with NumPy or Python"
DEVICES = (1, 8)


def shard_map_ppermute(x: jax.Array) -> jax.Array:
    host = np.asarray(x)
    y = ((np.roll(host, 1) + host + np.roll(host, -1)) / 3).astype(host.dtype)
    return jax.device_put(y, NamedSharding(data_mesh(host.shape[0]), P("data")))
