"""Eager shard_map (no jax.jit); a plain Python loop of exactly n - 1 hops, `for step in range(n - 1)`.

On one device the loop makes no hop at all.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    for name, a in (("h", h), ("w", w)):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError(f"{name} must be an array")
        if not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{name} must be numeric, not {a.dtype}")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D")
        if 0 in a.shape:
            raise ValueError(f"{name} has a dimension of 0")
    if w.shape[0] != h.shape[1]:
        raise ValueError("w must have F rows")

    S, F = h.shape
    mesh = axis_mesh("model", math.gcd(S, F))
    n = mesh.shape["model"]
    rows = S // n
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(h_cols, w_rows):
        me = jax.lax.axis_index("model")
        blocks = h_cols.reshape(n, rows, h_cols.shape[1])  # blocks of rows
        total = blocks[(me - 1) % n] @ w_rows  # the sum that ends on device me - 1 + n - 1
        for step in range(n - 1):
            total = jax.lax.ppermute(total, "model", perm=to_next)
            total = total + blocks[(me - 2 - step) % n] @ w_rows
        return total

    h = jax.device_put(jnp.asarray(h), NamedSharding(mesh, P(None, "model")))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P("model", None)))
    return jax.shard_map(
        local, mesh=mesh, in_specs=(P(None, "model"), P("model", None)), out_specs=P("model", None)
    )(h, w)
