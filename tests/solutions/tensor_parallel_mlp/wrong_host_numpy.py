"""Mistake: computed on the host with NumPy and laid out by rows afterwards: right values
and placement, no shard_map and no psum."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

VERDICT = "technique"
PHRASE = "computed on the host"
DEVICES = (1, 8)


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    dtype = jnp.result_type(x, w1, w2)
    x, w1, w2 = (np.asarray(a) for a in (x, w1, w2))
    out = (np.maximum(x @ w1, 0) @ w2).astype(dtype)
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    return jax.device_put(jnp.asarray(out), NamedSharding(mesh, P("data", None)))
