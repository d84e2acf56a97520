"""Mistake: the product computed with NumPy on the host, then placed on the mesh: no ring at all."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "technique"
PHRASE = "on the host"
DEVICES = (1, 8)


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    y = np.asarray(x) @ np.asarray(w)  # on the host
    return jax.device_put(y, NamedSharding(mesh, P(None, "model")))
