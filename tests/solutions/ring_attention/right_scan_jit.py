"""Jitted shard_map; the own block first, then a jax.lax.scan of n - 1 hops to the next device
(i -> i + 1), the online softmax accumulated in float32 at least."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", T): a mesh that divides T


def _validate(q, k, v, causal):
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating point, not {a.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v have different dtypes: {q.dtype}, {k.dtype}, {v.dtype}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, not {type(causal).__name__}")
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError("q, k and v must be 2-D")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"shapes differ: {q.shape}, {k.shape}, {v.shape}")
    if 0 in q.shape:
        raise ValueError("T and D must be at least 1")


def ring_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    _validate(q, k, v, causal)
    T, D = q.shape
    mesh = axis_mesh("seq", T)
    n = mesh.shape["seq"]
    acc = jnp.promote_types(q.dtype, jnp.float32)
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(q, k, v):
        me = jax.lax.axis_index("seq")
        rows = q.shape[0]
        qs = q.astype(acc) / math.sqrt(D)
        mine = me * rows + jnp.arange(rows)

        def attend(state, k, v, source):
            m, total, o = state
            s = qs @ k.astype(acc).T
            if causal:
                theirs = source * rows + jnp.arange(rows)
                s = jnp.where(theirs[None, :] <= mine[:, None], s, -jnp.inf)
            new_m = jnp.maximum(m, s.max(axis=1))
            safe = jnp.where(jnp.isfinite(new_m), new_m, 0)
            factor = jnp.exp(m - safe)
            p = jnp.exp(s - safe[:, None])
            return new_m, total * factor + p.sum(axis=1), o * factor[:, None] + p @ v.astype(acc)

        state = (jnp.full((rows,), -jnp.inf, acc), jnp.zeros((rows,), acc), jnp.zeros((rows, D), acc))
        state = attend(state, k, v, me)

        def hop(carry, step):
            state, k, v = carry
            k, v = jax.lax.ppermute((k, v), "seq", to_next)
            return (attend(state, k, v, (me - step) % n), k, v), None

        (state, _, _), _ = jax.lax.scan(hop, (state, k, v), jnp.arange(1, n))
        _, total, o = state
        return (o / total[:, None]).astype(q.dtype)

    spec = P("seq", None)
    q, k, v = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
