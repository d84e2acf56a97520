"""Mistake: the causal mask counts the queries' positions from the device's old block of
tokens (me * T / n), as ring attention does; after the all-to-all every device holds all T tokens."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "fail"
PHRASE = "counted the queries' positions"
DEVICES = (8,)


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))

    def local(q, k, v):
        q, k, v = (jax.lax.all_to_all(a, "seq", 1, 0, tiled=True) for a in (q, k, v))
        s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(K)
        if causal:
            n = jax.lax.axis_size("seq")
            mine = jax.lax.axis_index("seq") * (T // n) + jnp.arange(T)  # wrong: offset
            s = jnp.where(jnp.arange(T)[None, :] <= mine[:, None], s, -jnp.inf)
        o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)
        return jax.lax.all_to_all(o, "seq", 0, 1, tiled=True)

    spec = P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec))(q, k, v)
