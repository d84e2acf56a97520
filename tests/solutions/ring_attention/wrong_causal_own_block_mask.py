"""Mistake: the causal mask as a triangle on every block, as if each block were the device's own."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", T): a mesh that divides T

VERDICT = "fail"
PHRASE = "masked as if"
DEVICES = (8,)


def ring(q, k, v, causal, *, rescale=True, held=lambda me, step, n: (me - step) % n, barrier=True, unroll=True):
    """The ring with one thing changed at a time (fori_loop(1, n, unroll=True), hops to i + 1)."""
    T, D = q.shape
    mesh = axis_mesh("seq", T)
    n = mesh.shape["seq"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(q, k, v):
        me, rows = jax.lax.axis_index("seq"), q.shape[0]
        q = q / math.sqrt(D)
        mine = me * rows + jnp.arange(rows)

        def attend(step, m, total, o, k, v):
            s = q @ k.T
            if causal:
                theirs = held(me, step, n) * rows + jnp.arange(rows)
                s = jnp.where(theirs[None, :] <= mine[:, None], s, -jnp.inf)
            new_m = jnp.maximum(m, s.max(axis=1))
            factor = jnp.exp(m - new_m) if rescale else jnp.ones_like(m)
            w = jnp.exp(s - new_m[:, None])
            return new_m, total * factor + w.sum(axis=1), o * factor[:, None] + w @ v

        m, total, o = attend(0, jnp.full((rows,), -jnp.inf), jnp.zeros((rows,)), jnp.zeros(q.shape), k, v)

        def step(i, carry):
            if barrier:
                carry = jax.lax.optimization_barrier(carry)
            m, total, o, k, v = carry
            k, v = jax.lax.ppermute((k, v), "seq", to_next)
            return (*attend(i, m, total, o, k, v), k, v)

        m, total, o, _, _ = jax.lax.fori_loop(1, n, step, (m, total, o, k, v), unroll=unroll)
        return o / total[:, None]

    spec = P("seq", None)
    q, k, v = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)


def ring_attention(q, k, v, causal=False):
    return ring(q, k, v, causal, held=lambda me, step, n: me)
