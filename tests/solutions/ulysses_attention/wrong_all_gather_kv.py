"""Mistake: q re-split to heads by an all_to_all, but k and v all_gathered whole (every head of every
token on each device), then sliced to the device's heads: right values, the memory Ulysses saves spent."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "technique"
PHRASE = "all-gather"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    n = mesh.shape["seq"]

    def local(q, k, v):
        q = jax.lax.all_to_all(q, "seq", 1, 0, tiled=True)  # (T, H / n, K)
        first = jax.lax.axis_index("seq") * (H // n)
        k, v = (
            jax.lax.dynamic_slice_in_dim(jax.lax.all_gather(a, "seq", tiled=True), first, H // n, 1)
            for a in (k, v)
        )
        s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(K)
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)
        return jax.lax.all_to_all(o, "seq", 0, 1, tiled=True)

    spec = P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
