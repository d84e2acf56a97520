"""Shortcut: q, k and v whole on every device (P()), attention over everything, each device keeping its
own tokens; an all_to_all is run but multiplied by 0 (check_vma=False), so it never reaches the answer."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("seq", math.gcd(T, H))

VERDICT = "technique"
PHRASE = "never reaches the answer"
DEVICES = (8,)  # on one device an all-to-all has nothing to exchange: shard_map alone is asked


def ulysses_attention(q, k, v, causal=False):
    T, H, K = q.shape
    mesh = axis_mesh("seq", math.gcd(T, H))
    n = mesh.shape["seq"]

    def local(q, k, v):
        s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(K)
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
        o = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)
        mine = jax.lax.dynamic_slice_in_dim(o, jax.lax.axis_index("seq") * (T // n), T // n, 0)
        dead = jax.lax.all_to_all(mine, "seq", 0, 1, tiled=True)
        return mine + 0 * dead.sum()  # wrong: the all-to-all's result is thrown away

    whole, tokens = P(), P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, whole)) for a in (q, k, v))
    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(whole,) * 3, out_specs=tokens, check_vma=False)
    )(q, k, v)
