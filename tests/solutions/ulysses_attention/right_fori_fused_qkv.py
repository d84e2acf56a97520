"""Jitted shard_map; q, k and v stacked and re-split by ONE all_to_all, a jax.lax.fori_loop over the
device's heads; no all_to_all at all on a mesh of one device (nothing to exchange there)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))


def ulysses_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    import numpy as np

    arrays = (q, k, v)
    if any(not isinstance(a, (np.ndarray, jax.Array)) for a in arrays):
        raise TypeError("q, k and v must be arrays")
    if any(not jnp.issubdtype(a.dtype, jnp.floating) for a in arrays):
        raise TypeError("q, k and v must be floating point")
    if len({a.dtype for a in arrays}) != 1:
        raise TypeError("q, k and v must have one dtype")
    if not isinstance(causal, bool):
        raise TypeError("causal must be a bool")
    if any(a.ndim != 3 for a in arrays) or len({a.shape for a in arrays}) != 1:
        raise ValueError("q, k and v must have one shape (T, H, K)")
    if 0 in q.shape:
        raise ValueError("T, H and K must be positive")
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    n = mesh.shape["seq"]
    spec = P("seq", None, None)

    def local(q, k, v):
        qkv = jnp.stack([q, k, v])  # (3, T / n, H, K)
        if n > 1:
            qkv = jax.lax.all_to_all(qkv, "seq", split_axis=2, concat_axis=1, tiled=True)
        q, k, v = qkv.astype(jnp.promote_types(qkv.dtype, jnp.float32))  # (T, H / n, K) each
        mask = jnp.arange(T)[:, None] >= jnp.arange(T)[None, :]

        def head(h, out):
            s = q[:, h] @ k[:, h].T / math.sqrt(K)
            if causal:
                s = jnp.where(mask, s, -jnp.inf)
            w = jnp.exp(s - jnp.max(s, axis=1, keepdims=True))
            return out.at[:, h].set((w / jnp.sum(w, axis=1, keepdims=True)) @ v[:, h])

        out = jax.lax.fori_loop(0, q.shape[1], head, jnp.zeros_like(q)).astype(qkv.dtype)
        if n > 1:
            out = jax.lax.all_to_all(out, "seq", split_axis=0, concat_axis=1, tiled=True)
        return out

    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in arrays)
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
