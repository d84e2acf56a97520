"""Mistake: k and v placed whole on every device (in_specs P()), each device slicing its own heads; only
q and the output go through all_to_alls: right values and technique, but every head of k is on every device."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "budget"
PHRASE = "one device holds"
DEVICES = (8,)  # the budget of bytes held is stated on several devices only


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    n = mesh.shape["seq"]

    def local(q, k, v):
        q = jax.lax.all_to_all(q, "seq", 1, 0, tiled=True)  # (T, H / n, K)
        first = jax.lax.axis_index("seq") * (H // n)
        k, v = (jax.lax.dynamic_slice_in_dim(a, first, H // n, 1) for a in (k, v))
        s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(K)
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)
        return jax.lax.all_to_all(o, "seq", 0, 1, tiled=True)

    tokens, whole = P("seq", None, None), P()
    q = jax.device_put(q, NamedSharding(mesh, tokens))
    k, v = (jax.device_put(a, NamedSharding(mesh, whole)) for a in (k, v))
    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(tokens, whole, whole), out_specs=tokens)
    )(q, k, v)
