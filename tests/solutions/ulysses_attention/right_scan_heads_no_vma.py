"""Jitted shard_map with check_vma=False; a jax.lax.scan over the device's heads (heads moved to the
front), q pre-scaled by 1/sqrt(K); jax.jit around the whole function, causal static."""

import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))


def _check(q, k, v, causal):
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not hasattr(a, "shape") or not hasattr(a, "dtype") or isinstance(a, (list, tuple)):
            raise TypeError(f"{name} must be an array")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name}: floating point only, got {a.dtype}")
        if a.ndim != 3:
            raise ValueError(f"{name} must be (T, H, K), got {a.shape}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("dtypes differ")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError("shapes differ")
    if 0 in q.shape:
        raise ValueError("nothing to attend to")
    if not isinstance(causal, bool):
        raise TypeError("causal must be True or False")


@functools.partial(jax.jit, static_argnames="causal")
def _attend(q, k, v, causal):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H), traced=True)
    spec = P("seq", None, None)
    q, k, v = (jax.lax.with_sharding_constraint(a, NamedSharding(mesh, spec)) for a in (q, k, v))

    def local(q, k, v):
        qh, kh, vh = (
            jnp.moveaxis(jax.lax.all_to_all(a, "seq", 1, 0, tiled=True), 1, 0).astype(jnp.float32)
            for a in (q, k, v)
        )  # (H / n, T, K)
        qh = qh * (1.0 / math.sqrt(K))
        keep = jnp.tril(jnp.ones((T, T), bool))

        def head(_, qkv):
            qi, ki, vi = qkv
            s = qi @ ki.T
            if causal:
                s = jnp.where(keep, s, -jnp.inf)
            return None, jax.nn.softmax(s, axis=1) @ vi

        _, out = jax.lax.scan(head, None, (qh, kh, vh))
        out = jnp.moveaxis(out, 0, 1).astype(q.dtype)  # (T, H / n, K)
        return jax.lax.all_to_all(out, "seq", 0, 1, tiled=True)

    return jax.shard_map(
        local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False
    )(q, k, v)


def ulysses_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    _check(q, k, v, causal)
    T, H, _ = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    out = _attend(q, k, v, causal)
    return jax.device_put(out, NamedSharding(mesh, P("seq", None, None)))
