"""Jitted bidirectional ring (as JAX's shard_map guide): each block cut in two halves, one sent each way,
a Python loop of n - 1 steps."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    if not all(isinstance(a, jax.Array) or type(a).__name__ == "ndarray" for a in (x, w)):
        raise TypeError("x and w must be arrays")
    if not all(jnp.issubdtype(a.dtype, jnp.number) for a in (x, w)):
        raise TypeError("x and w must be numeric arrays")
    if x.ndim != 2 or w.ndim != 2 or 0 in (*x.shape, *w.shape) or w.shape[0] != x.shape[1]:
        raise ValueError(f"bad shapes {x.shape} @ {w.shape}")

    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    n = mesh.shape["model"]
    to_next = [(i, (i + 1) % n) for i in range(n)]
    to_previous = [(i, (i - 1) % n) for i in range(n)]

    def local(x_block, w_cols):
        me = jax.lax.axis_index("model")
        rows = x_block.shape[0]
        half = rows // 2
        top, bottom = x_block[:half], x_block[half:]

        def place(out, block, row):
            return jax.lax.dynamic_update_slice_in_dim(out, block @ w_cols, row, axis=0)

        first = x_block @ w_cols
        out = jnp.zeros((n * rows, w_cols.shape[1]), first.dtype)
        out = jax.lax.dynamic_update_slice_in_dim(out, first, me * rows, axis=0)
        for step in range(1, n):
            bottom = jax.lax.ppermute(bottom, "model", perm=to_previous)  # from me + step
            out = place(out, bottom, (me + step) % n * rows + half)
            if half:
                top = jax.lax.ppermute(top, "model", perm=to_next)  # from me - step
                out = place(out, top, (me - step) % n * rows)
        return out

    specs = (P("model", None), P(None, "model"))
    x, w = (jax.device_put(jnp.asarray(a), NamedSharding(mesh, s)) for a, s in zip((x, w), specs))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P(None, "model")))(x, w)
