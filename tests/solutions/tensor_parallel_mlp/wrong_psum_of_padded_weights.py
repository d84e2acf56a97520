"""Mistake: w1 and w2 gathered whole over "model" by a psum of zero-padded blocks, then the
whole MLP on every device: right values, the weights not kept split."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

VERDICT = "technique"
PHRASE = "w1 or w2 (the weights) travels"
DEVICES = (8,)  # on one device there is nothing to gather


def _validate(x, w1, w2):
    for name, a in (("x", x), ("w1", w1), ("w2", w2)):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"{name} must be an array, got {type(a).__name__}")
        real = jnp.issubdtype(a.dtype, jnp.integer) or jnp.issubdtype(a.dtype, jnp.floating)
        if a.dtype == jnp.bool_ or not real:
            raise TypeError(f"{name} must hold real numbers, got {a.dtype}")
    if x.ndim != 2 or w1.ndim != 2 or w2.ndim != 2:
        raise ValueError(f"x, w1 and w2 must be 2-D, got ranks {x.ndim}, {w1.ndim}, {w2.ndim}")
    if x.shape[1] != w1.shape[0] or w1.shape[1] != w2.shape[0]:
        raise ValueError(f"shapes do not fit: x {x.shape}, w1 {w1.shape}, w2 {w2.shape}")


def _gather_by_psum(a, axis):
    n = jax.lax.axis_size("model")
    i = jax.lax.axis_index("model")
    k = a.shape[axis]
    shape = list(a.shape)
    shape[axis] = n * k
    padded = jnp.zeros(shape, a.dtype)
    padded = jax.lax.dynamic_update_slice_in_dim(padded, a, i * k, axis)
    return jax.lax.psum(padded, "model")  # the whole weight on every device


def _local(x, w1, w2):
    W1 = _gather_by_psum(w1, 1)
    W2 = _gather_by_psum(w2, 0)
    return jax.nn.relu(x @ W1) @ W2  # the whole MLP, on every device


def tensor_parallel_mlp(x, w1, w2):
    _validate(x, w1, w2)
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    if x.shape[1] == 0 and w1.shape[1] == 0:
        zeros = jnp.zeros((x.shape[0], w2.shape[1]), jnp.result_type(x, w1, w2))
        return jax.device_put(zeros, NamedSharding(mesh, P("data", None)))
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))
    return jax.jit(jax.shard_map(_local, mesh=mesh, in_specs=specs, out_specs=P("data", None)))(
        x, w1, w2
    )
