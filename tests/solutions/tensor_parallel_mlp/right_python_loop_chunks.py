"""Jitted shard_map, a plain Python loop over blocks of 2 of this device's hidden units,
their shares added locally, then one psum over "model"."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

CHUNK = 2


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    if not all(isinstance(a, (jax.Array, np.ndarray)) for a in (x, w1, w2)):
        raise TypeError("x, w1 and w2 must be arrays")
    for a in (x, w1, w2):
        if np.dtype(a.dtype).kind not in "iuf" and a.dtype != jnp.bfloat16:
            raise TypeError(f"{a.dtype}: not a real number type")
    if (x.ndim, w1.ndim, w2.ndim) != (2, 2, 2):
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
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    w1 = jax.device_put(w1, NamedSharding(mesh, P(None, "model")))
    w2 = jax.device_put(w2, NamedSharding(mesh, P("model", None)))

    def local(x, w1, w2):
        share = jnp.zeros((x.shape[0], w2.shape[1]), out_dtype)
        for start in range(0, w1.shape[1], CHUNK):  # static: this device's units
            stop = start + CHUNK
            part = jax.nn.relu(x @ w1[:, start:stop]) @ w2[start:stop]
            share = share + part.astype(out_dtype)
        return jax.lax.psum(share, "model")

    return jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P("data", None), P(None, "model"), P("model", None)),
            out_specs=P("data", None),
        )
    )(x, w1, w2)
