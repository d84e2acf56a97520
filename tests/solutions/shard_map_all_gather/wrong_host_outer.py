"""Shortcut: np.outer on the host, then the rows placed on the mesh."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "with NumPy or Python"
DEVICES = (1, 8)


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    host = np.asarray(x)
    return jax.device_put(np.outer(host, host), NamedSharding(data_mesh(host.shape[0]), P("data")))
