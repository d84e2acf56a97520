"""Eager shard_map (no jax.jit), einsum and jnp.maximum for relu, one psum over "model"."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    for a in (x, w1, w2):
        if not hasattr(a, "dtype") or not hasattr(a, "shape"):
            raise TypeError(f"not an array: {type(a).__name__}")
        kind = jnp.dtype(a.dtype).kind
        if kind not in "iuf" and a.dtype != jnp.bfloat16:
            raise TypeError(f"dtype {a.dtype} is not a real number type")
    if [a.ndim for a in (x, w1, w2)] != [2, 2, 2]:
        raise ValueError("x, w1 and w2 must be matrices")
    (_, d), (d1, h), (h2, _) = x.shape, w1.shape, w2.shape
    if d != d1 or h != h2:
        raise ValueError("shapes do not fit together")

    mesh = data_model_mesh(x.shape[0], h)
    if d == 0 or h == 0:  # the output is zeros
        # Eager shard_map runs each operation as its own program, and JAX cannot lower one
        # whose operands are all empty ("... GlobalToLocalShape"): write the zeros directly.
        zeros = jnp.zeros((x.shape[0], w2.shape[1]), jnp.result_type(x, w1, w2))
        return jax.device_put(zeros, NamedSharding(mesh, P("data", None)))
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    w1 = jax.device_put(w1, NamedSharding(mesh, P(None, "model")))
    w2 = jax.device_put(w2, NamedSharding(mesh, P("model", None)))

    def local(x, w1, w2):
        hidden = jnp.einsum("bd,dh->bh", x, w1)
        hidden = jnp.maximum(hidden, jnp.zeros((), hidden.dtype))
        return jax.lax.psum(jnp.einsum("bh,ho->bo", hidden, w2), "model")

    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P("data", None), P(None, "model"), P("model", None)),
        out_specs=P("data", None),
    )(x, w1, w2)
