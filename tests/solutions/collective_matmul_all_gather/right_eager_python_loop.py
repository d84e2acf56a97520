"""Eager shard_map (no jax.jit); the ring is a plain Python loop of exactly n - 1 hops.

On one device the loop makes no hop at all.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    for name, a in (("x", x), ("w", w)):
        if not isinstance(a, (np.ndarray, jax.Array)):
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{name} must be numeric, not {a.dtype}")
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D, got shape {a.shape}")
        if 0 in a.shape:
            raise ValueError(f"{name} has an empty dimension: {a.shape}")
    if w.shape[0] != x.shape[1]:
        raise ValueError(f"w has {w.shape[0]} rows, x has {x.shape[1]} columns")

    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    n = mesh.shape["model"]
    to_previous = [(i, (i - 1) % n) for i in range(n)]

    def local(x_block, w_cols):
        me = jax.lax.axis_index("model")
        rows = x_block.shape[0]
        blocks = [None] * n  # products, by ring step
        block = x_block
        blocks[0] = block @ w_cols
        for step in range(n - 1):
            block = jax.lax.ppermute(block, "model", perm=to_previous)
            blocks[step + 1] = block @ w_cols
        # After `step` hops device `me` holds block (me + step) % n: put them in row order.
        by_step = jnp.stack(blocks)  # (n, rows, F/n), indexed by step
        order = (jnp.arange(n) - me) % n  # the step at which block b arrived
        return by_step[order].reshape(n * rows, w_cols.shape[1])

    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("model", None)))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P(None, "model")))
    return jax.shard_map(
        local, mesh=mesh, in_specs=(P("model", None), P(None, "model")), out_specs=P(None, "model")
    )(x, w)
