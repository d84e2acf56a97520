"""Eager shard_map (no jax.jit); a rolled jax.lax.fori_loop(1, n), blocks sent to the PREVIOUS device
(i -> i - 1), so after s hops device i holds block (i + s) % n."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", T): a mesh that divides T


def ring_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    for a in (q, k, v):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError("q, k and v must be arrays")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"floating point expected, got {a.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("k and v must have q's dtype")
    if type(causal) is not bool:
        raise TypeError("causal must be a Python bool")
    if q.ndim != 2 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError("q, k and v must be 2-D arrays of one shape")
    if q.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError("T and D must be positive")

    T, D = q.shape
    mesh = axis_mesh("seq", T)
    n = mesh.shape["seq"]
    to_previous = [(i, (i - 1) % n) for i in range(n)]
    scale = 1.0 / math.sqrt(D)

    def local(q, k, v):
        me = jax.lax.axis_index("seq")
        rows = q.shape[0]
        q32 = q.astype(jnp.float32) * scale
        mine = me * rows + jnp.arange(rows)

        def attend(step, m, total, o, k, v):
            s = q32 @ k.astype(jnp.float32).T
            if causal:
                theirs = ((me + step) % n) * rows + jnp.arange(rows)
                s = jnp.where(theirs[None, :] <= mine[:, None], s, -jnp.inf)
            new_m = jnp.maximum(m, jnp.max(s, axis=1))
            ref = jnp.where(new_m == -jnp.inf, 0.0, new_m)
            factor = jnp.exp(m - ref)
            p = jnp.exp(s - ref[:, None])
            return new_m, total * factor + p.sum(1), o * factor[:, None] + p @ v.astype(jnp.float32)

        m = jnp.full((rows,), -jnp.inf, jnp.float32)
        total = jnp.zeros((rows,), jnp.float32)
        o = jnp.zeros((rows, D), jnp.float32)
        m, total, o = attend(0, m, total, o, k, v)

        def body(step, carry):
            m, total, o, k, v = carry
            k = jax.lax.ppermute(k, "seq", to_previous)
            v = jax.lax.ppermute(v, "seq", to_previous)
            return (*attend(step, m, total, o, k, v), k, v)

        m, total, o, _, _ = jax.lax.fori_loop(1, n, body, (m, total, o, k, v))
        return (o / total[:, None]).astype(q.dtype)

    rows = NamedSharding(mesh, P("seq", None))
    q, k, v = (jax.device_put(jnp.asarray(a), rows) for a in (q, k, v))
    return jax.shard_map(local, mesh=mesh, in_specs=P("seq", None), out_specs=P("seq", None))(q, k, v)
