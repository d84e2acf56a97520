"""Jitted shard_map; three all_to_alls (tokens -> heads), einsum attention over the local heads in
float32 at least, one all_to_all back (heads -> tokens)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))


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
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise ValueError("q, k and v must be 3-D: (T, H, K)")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"shapes differ: {q.shape}, {k.shape}, {v.shape}")
    if 0 in q.shape:
        raise ValueError("T, H and K must be at least 1")


def ulysses_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    _validate(q, k, v, causal)
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    acc = jnp.promote_types(q.dtype, jnp.float32)

    def local(q, k, v):
        to_heads = lambda a: jax.lax.all_to_all(a, "seq", 1, 0, tiled=True)  # noqa: E731
        q, k, v = to_heads(q), to_heads(k), to_heads(v)  # (T, H / n, K)
        s = jnp.einsum("qhd,khd->hqk", q.astype(acc), k.astype(acc)) / math.sqrt(K)
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v.astype(acc))
        return jax.lax.all_to_all(o.astype(q.dtype), "seq", 0, 1, tiled=True)  # (T / n, H, K)

    spec = P("seq", None, None)
    q, k, v = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
