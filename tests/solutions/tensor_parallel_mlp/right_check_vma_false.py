"""Jitted shard_map with check_vma=False (legal: the psum makes every "model" copy equal)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    arrays = (x, w1, w2)
    if not all(isinstance(a, (jax.Array, np.ndarray)) for a in arrays):
        raise TypeError("x, w1 and w2 must be arrays")
    for a in arrays:
        if jnp.issubdtype(a.dtype, jnp.bool_) or jnp.issubdtype(a.dtype, jnp.complexfloating):
            raise TypeError(f"{a.dtype} is not a real number type")
        if not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{a.dtype} is not a number type")
    if any(a.ndim != 2 for a in arrays):
        raise ValueError("wrong rank")
    if x.shape[1] != w1.shape[0] or w1.shape[1] != w2.shape[0]:
        raise ValueError("shapes do not fit together")

    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    if x.shape[1] == 0 and w1.shape[1] == 0:  # d = h = 0: every operand is empty
        # JAX cannot lower a shard_map whose operands are all empty to a non-empty result
        # ("expected at least one operand ... GlobalToLocalShape"); the answer is zeros.
        zeros = jnp.zeros((x.shape[0], w2.shape[1]), jnp.result_type(x, w1, w2))
        return jax.device_put(zeros, NamedSharding(mesh, P("data", None)))
    specs = (P("data", None), P(None, "model"), P("model", None))
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(arrays, specs)]

    def local(x, w1, w2):
        return jax.lax.psum(jax.nn.relu(jnp.matmul(x, w1)) @ w2, "model")

    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("data", None), check_vma=False)
    )(*placed)
