"""Jitted shard_map with check_vma=False; jax.lax.fori_loop(1, n, unroll=True) (its body traced even on
one device), an optimization_barrier before each hop, k and v sent as one stacked array."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", T): a mesh that divides T


def ring_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    import numpy as np

    for a in (q, k, v):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError(f"expected an array, got {type(a).__name__}")
    if not jnp.issubdtype(q.dtype, jnp.floating):
        raise TypeError(f"q must be floating point, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("k and v must have the dtype of q")
    if not isinstance(causal, bool):
        raise TypeError("causal must be True or False")
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError("wrong rank")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError("shapes differ")
    if q.size == 0:
        raise ValueError("T or D is 0")

    T, D = q.shape
    mesh = axis_mesh("seq", T)
    n = mesh.shape["seq"]
    ring = [(i, (i + 1) % n) for i in range(n)]
    f32 = jnp.promote_types(q.dtype, jnp.float32)

    def local(q, k, v):
        me = jax.lax.axis_index("seq")
        rows = q.shape[0]
        q = q.astype(f32) * (1 / math.sqrt(D))
        positions = jnp.arange(rows)
        kv = jnp.stack([k, v])  # (2, rows, D): one hop carries both

        def attend(step, state, kv):
            m, total, o = state
            s = q @ kv[0].astype(f32).T
            if causal:
                src = (me - step) % n
                s = jnp.where(src * rows + positions[None, :] <= me * rows + positions[:, None], s, -jnp.inf)
            new_m = jnp.maximum(m, s.max(-1))
            shift = jnp.where(jnp.isfinite(new_m), new_m, 0)
            factor, p = jnp.exp(m - shift), jnp.exp(s - shift[:, None])
            return new_m, total * factor + p.sum(-1), o * factor[:, None] + p @ kv[1].astype(f32)

        state = (jnp.full((rows,), -jnp.inf, f32), jnp.zeros((rows,), f32), jnp.zeros((rows, D), f32))
        state = attend(0, state, kv)

        def step(i, carry):
            state, kv = jax.lax.optimization_barrier(carry)
            kv = jax.lax.ppermute(kv, "seq", ring)
            return attend(i, state, kv), kv

        (m, total, o), _ = jax.lax.fori_loop(1, n, step, (state, kv), unroll=True)
        return (o / total[:, None]).astype(k.dtype)

    spec = P("seq", None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))
    f = jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False)
    return jax.jit(f)(q, k, v)
