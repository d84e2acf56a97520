"""Jitted shard_map on the ("data", "model") mesh: each device's units' share of the
output, one psum over "model"."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes


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


def _local(x, w1, w2):
    share = jax.nn.relu(x @ w1) @ w2  # this device's hidden units, its rows
    return jax.lax.psum(share, "model")  # every unit's share added


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    _validate(x, w1, w2)
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    if x.shape[1] == 0 and w1.shape[1] == 0:  # d = h = 0: every operand is empty
        # JAX cannot lower a shard_map whose operands are all empty to a non-empty result
        # ("expected at least one operand ... GlobalToLocalShape"); the answer is zeros.
        zeros = jnp.zeros((x.shape[0], w2.shape[1]), jnp.result_type(x, w1, w2))
        return jax.device_put(zeros, NamedSharding(mesh, P("data", None)))
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))
    return jax.jit(
        jax.shard_map(_local, mesh=mesh, in_specs=specs, out_specs=P("data", None))
    )(x, w1, w2)
