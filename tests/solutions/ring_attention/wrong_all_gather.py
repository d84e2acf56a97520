"""Mistake: all_gather k and v on every device, then ordinary attention: right values, no ring."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", T): a mesh that divides T

VERDICT = "technique"
PHRASE = "no collective-permute"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def ring_attention(q, k, v, causal=False):
    mesh = axis_mesh("seq", q.shape[0])

    def local(q, k, v):
        k = jax.lax.all_gather(k, "seq", tiled=True)
        v = jax.lax.all_gather(v, "seq", tiled=True)
        s = q @ k.T / math.sqrt(q.shape[1])
        if causal:
            me = jax.lax.axis_index("seq") * q.shape[0] + jnp.arange(q.shape[0])
            s = jnp.where(jnp.arange(k.shape[0])[None, :] <= me[:, None], s, -jnp.inf)
        return jax.nn.softmax(s, axis=1) @ v

    spec = P("seq", None)
    q, k, v = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
