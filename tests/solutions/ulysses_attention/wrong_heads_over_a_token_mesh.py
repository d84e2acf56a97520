"""Mistake: the mesh divides T only (axis_mesh("seq", T)), as ring attention's does: with fewer
heads than devices the all-to-all cannot give each device a head (Ulysses needs n <= H)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "error"
PHRASE = "all_to_all"
DEVICES = (8,)


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", T)  # wrong: n must divide H too

    def local(q, k, v):
        q, k, v = (jax.lax.all_to_all(a, "seq", 1, 0, tiled=True) for a in (q, k, v))
        s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(K)
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)
        return jax.lax.all_to_all(o, "seq", 0, 1, tiled=True)

    spec = P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
