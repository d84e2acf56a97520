"""Mistake: ring attention instead: k and v sent round the ring of devices by ppermute (n - 1 hops),
every head at once, the online softmax: right values, another technique."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "technique"
PHRASE = "no all-to-all"
DEVICES = (8,)  # on one device the ring makes no hop, and shard_map alone is asked


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    n = mesh.shape["seq"]

    def local(q, k, v):
        me, r = jax.lax.axis_index("seq"), q.shape[0]
        q = q / math.sqrt(K)
        mine = me * r + jnp.arange(r)
        top = jnp.full((H, r), -jnp.inf)
        total, out = jnp.zeros((H, r)), jnp.zeros((H, r, K))
        for step in range(n):
            if step:
                k, v = jax.lax.ppermute((k, v), "seq", [(i, (i + 1) % n) for i in range(n)])
            s = jnp.einsum("qhd,khd->hqk", q, k)
            if causal:
                theirs = ((me - step) % n) * r + jnp.arange(r)
                s = jnp.where(theirs[None, None, :] <= mine[None, :, None], s, -jnp.inf)
            new = jnp.maximum(top, s.max(axis=2))
            scale = jnp.exp(top - new)
            w = jnp.exp(s - new[..., None])
            total = total * scale + w.sum(axis=2)
            out = out * scale[..., None] + jnp.einsum("hqk,khd->hqd", w, v)
            top = new
        return jnp.moveaxis(out / total[..., None], 0, 1)

    spec = P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
