"""Mistake: the network run with NumPy on the host, then copied to every device."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages

VERDICT = "technique"
PHRASE = "on the host"
DEVICES = (1, 8)


def pipeline_forward(x, w):
    mesh = axis_mesh("stage", w.shape[0])
    h = np.asarray(x)
    for layer in np.asarray(w):
        h = np.tanh(h @ layer)
    return jax.device_put(h, NamedSharding(mesh, P()))
