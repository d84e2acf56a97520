"""Shortcut: doubled on the host with NumPy, then placed on the mesh; no shard_map at all."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "not with jax.shard_map"
DEVICES = (1, 8)


def shard_map_double(x: jax.Array) -> jax.Array:
    x = np.asarray(x)
    if x.ndim != 1:
        raise ValueError("x must be 1-D")
    doubled = jnp.asarray(x) * 2.0  # computed on one device, dtype as x * 2.0
    return jax.device_put(doubled, NamedSharding(data_mesh(x.shape[0]), P("data")))
