"""Jitted shard_map; running sums sent to the next device in a jax.lax.fori_loop(1, n, unroll=True)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def _check(h, w):
    for name, a in (("h", h), ("w", w)):
        if not isinstance(a, jax.Array) and type(a).__module__ != "numpy":
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not hasattr(a, "dtype") or not jnp.issubdtype(a.dtype, jnp.number):
            raise TypeError(f"{name} must be numeric")
    if h.ndim != 2 or w.ndim != 2:
        raise ValueError("h and w must be 2-D")
    if 0 in h.shape or 0 in w.shape:
        raise ValueError("a dimension is 0")
    if w.shape[0] != h.shape[1]:
        raise ValueError(f"w has {w.shape[0]} rows, h has {h.shape[1]} columns")


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    _check(h, w)
    mesh = axis_mesh("model", math.gcd(h.shape[0], h.shape[1]))
    n = mesh.shape["model"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(h_cols, w_rows):
        me = jax.lax.axis_index("model")
        rows = h_cols.shape[0] // n

        def share(block):
            return jax.lax.dynamic_slice_in_dim(h_cols, block * rows, rows, 0) @ w_rows

        def step(i, total):
            total = jax.lax.ppermute(total, "model", perm=to_next)
            return total + share((me - 1 - i) % n)

        return jax.lax.fori_loop(1, n, step, share((me - 1) % n), unroll=True)

    specs = (P(None, "model"), P("model", None))
    h = jax.device_put(h, NamedSharding(mesh, specs[0]))
    w = jax.device_put(w, NamedSharding(mesh, specs[1]))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("model", None)))(h, w)
