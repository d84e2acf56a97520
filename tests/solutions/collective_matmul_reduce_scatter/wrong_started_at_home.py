"""Mistake: each running sum starts on its own block's device, so after n - 1 hops forward every
sum is complete but sits one device too far back (device b holds block b + 1)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "wrong devices"
DEVICES = (8,)


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(*h.shape))
    n = mesh.shape["model"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(h_cols, w_rows):
        me = jax.lax.axis_index("model")
        rows = h_cols.shape[0] // n

        def share(block):
            return jax.lax.dynamic_slice_in_dim(h_cols, block * rows, rows, 0) @ w_rows

        def step(i, total):
            total = jax.lax.ppermute(total, "model", perm=to_next)
            return total + share((me - i) % n)

        return jax.lax.fori_loop(1, n, step, share(me), unroll=True)  # wrong start

    specs = (P(None, "model"), P("model", None))
    h, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((h, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("model", None)))(h, w)
