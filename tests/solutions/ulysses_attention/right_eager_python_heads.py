"""Eager shard_map (no jax.jit); a Python loop over the device's heads after the all_to_alls, each
head's softmax written out with its maximum subtracted."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))


def ulysses_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    for a in (q, k, v):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError("q, k and v must be arrays")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"floating point expected, got {a.dtype}")
    if len({q.dtype, k.dtype, v.dtype}) > 1:
        raise TypeError("q, k and v must share a dtype")
    if type(causal) is not bool:
        raise TypeError("causal must be a bool")
    if q.ndim != 3 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(f"q, k and v must all be (T, H, K): {q.shape}, {k.shape}, {v.shape}")
    if min(q.shape) == 0:
        raise ValueError("empty T, H or K")
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    tokens = P("seq", None, None)

    def per_device(q, k, v):
        q = jax.lax.all_to_all(q, "seq", split_axis=1, concat_axis=0, tiled=True)
        k = jax.lax.all_to_all(k, "seq", split_axis=1, concat_axis=0, tiled=True)
        v = jax.lax.all_to_all(v, "seq", split_axis=1, concat_axis=0, tiled=True)
        outs = []
        for h in range(q.shape[1]):
            s = q[:, h].astype(jnp.float32) @ k[:, h].astype(jnp.float32).T / math.sqrt(K)
            if causal:
                s = jnp.where(jnp.arange(T)[None, :] > jnp.arange(T)[:, None], -jnp.inf, s)
            e = jnp.exp(s - s.max(axis=1, keepdims=True))
            outs.append((e / e.sum(axis=1, keepdims=True)) @ v[:, h].astype(jnp.float32))
        out = jnp.stack(outs, axis=1).astype(q.dtype)
        return jax.lax.all_to_all(out, "seq", split_axis=0, concat_axis=1, tiled=True)

    q, k, v = (jax.device_put(a, NamedSharding(mesh, tokens)) for a in (q, k, v))
    return jax.shard_map(per_device, mesh=mesh, in_specs=(tokens,) * 3, out_specs=tokens)(q, k, v)
