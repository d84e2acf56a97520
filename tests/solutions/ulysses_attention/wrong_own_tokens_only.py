"""Mistake: no re-split at all: each device attends over its own block of tokens, every head."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "fail"
PHRASE = "attended over its own"
DEVICES = (8,)  # on one device its own tokens are all of them


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))

    def local(q, k, v):
        t = q.shape[0]
        s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(K)
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
        return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)

    spec = P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
