"""Mistake: blocks sent to the NEXT device (i -> i + 1) but written at the rows of block me + step,
as if they came from the next device."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh

VERDICT = "fail"
PHRASE = "wrong places"
DEVICES = (8,)


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    n = mesh.shape["model"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(x_block, w_cols):
        me = jax.lax.axis_index("model")
        rows = x_block.shape[0]
        first = x_block @ w_cols
        out = jnp.zeros((n * rows, w_cols.shape[1]), first.dtype)
        out = jax.lax.dynamic_update_slice_in_dim(out, first, me * rows, 0)

        def step(i, carry):
            out, block = carry
            block = jax.lax.ppermute(block, "model", perm=to_next)  # wrong way for the rows below
            out = jax.lax.dynamic_update_slice_in_dim(out, block @ w_cols, (me + i) % n * rows, 0)
            return out, block

        out, _ = jax.lax.fori_loop(1, n, step, (out, x_block), unroll=True)
        return out

    specs = (P("model", None), P(None, "model"))
    x, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((x, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P(None, "model")))(x, w)
