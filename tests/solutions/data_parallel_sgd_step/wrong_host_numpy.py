"""Mistake: the step computed on the host with NumPy's closed form, then copied to every
device: right values and placement, no shard_map and no all-reduce."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "shard_map"
DEVICES = (1, 8)


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    dtype_w, dtype_b = w.dtype, b.dtype
    w, b, x, y = (np.asarray(a, np.float64) for a in (w, b, x, y))
    r = x @ w + b - y
    scale = 2 / r.size
    new_w = (w - lr * scale * x.T @ r).astype(dtype_w)
    new_b = (b - lr * scale * r.sum(0)).astype(dtype_b)
    mesh = data_mesh(x.shape[0])
    return jax.device_put((jnp.asarray(new_w), jnp.asarray(new_b)), NamedSharding(mesh, P()))
