"""Jitted shard_map, this device's hidden units one at a time with lax.scan (a rank-one
update each), then one psum over "model"."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    for a in (x, w1, w2):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("x, w1 and w2 must be arrays")
        if a.dtype == bool or not (
            jnp.issubdtype(a.dtype, jnp.integer) or jnp.issubdtype(a.dtype, jnp.floating)
        ):
            raise TypeError(f"dtype {a.dtype} is not a real number type")
    if x.ndim != 2 or w1.ndim != 2 or w2.ndim != 2:
        raise ValueError("x, w1 and w2 must be 2-D")
    if x.shape[1] != w1.shape[0] or w1.shape[1] != w2.shape[0]:
        raise ValueError("shapes do not fit together")

    out_dtype = jnp.result_type(x, w1, w2)
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    if x.shape[1] == 0 and w1.shape[1] == 0:  # d = h = 0: every operand is empty
        # JAX cannot lower a shard_map whose operands are all empty to a non-empty result
        # ("expected at least one operand ... GlobalToLocalShape"); the answer is zeros.
        zeros = jnp.zeros((x.shape[0], w2.shape[1]), jnp.result_type(x, w1, w2))
        return jax.device_put(zeros, NamedSharding(mesh, P("data", None)))
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))

    def local(x, w1, w2):
        def add_unit(total, unit):
            column, row = unit  # w1[:, j] and w2[j, :]
            activation = jax.nn.relu(x @ column)  # (rows,)
            return total + (activation[:, None] * row[None, :]).astype(out_dtype), None

        zeros = jnp.zeros((x.shape[0], w2.shape[1]), out_dtype)
        zeros = jax.lax.pcast(zeros, ("data", "model"), to="varying")
        share, _ = jax.lax.scan(add_unit, zeros, (w1.T, w2))
        return jax.lax.psum(share, "model")

    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("data", None))
    )(x, w1, w2)
