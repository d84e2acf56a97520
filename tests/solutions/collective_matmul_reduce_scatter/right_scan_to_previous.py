"""Jitted shard_map; a jax.lax.scan of n - 1 hops, running sums sent to the PREVIOUS device (i -> i - 1)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    for a in (h, w):
        if not hasattr(a, "dtype") or not hasattr(a, "shape") or isinstance(a, (list, tuple)):
            raise TypeError(f"expected an array, got {type(a).__name__}")
        if not (jnp.issubdtype(a.dtype, jnp.integer) or jnp.issubdtype(a.dtype, jnp.inexact)):
            raise TypeError(f"expected a numeric array, got {a.dtype}")
    if h.ndim != 2 or w.ndim != 2 or min(h.shape) == 0 or min(w.shape) == 0:
        raise ValueError(f"h and w must be non-empty matrices, got {h.shape} and {w.shape}")
    if h.shape[1] != w.shape[0]:
        raise ValueError(f"{h.shape} @ {w.shape}: shapes do not fit")

    mesh = axis_mesh("model", math.gcd(*h.shape))
    n = mesh.shape["model"]
    to_previous = [(i, (i - 1) % n) for i in range(n)]

    def local(h_cols, w_rows):
        me = jax.lax.axis_index("model")
        rows = h_cols.shape[0] // n

        def share(block):
            return jax.lax.dynamic_slice_in_dim(h_cols, block * rows, rows, 0) @ w_rows

        # Moving backwards, the sum of block b must start n - 1 hops ahead of b: on device b + 1.
        def step(total, k):
            total = jax.lax.ppermute(total, "model", perm=to_previous)
            return total + share((me + 1 + k) % n), None

        total, _ = jax.lax.scan(step, share((me + 1) % n), jnp.arange(1, n))
        return total

    specs = (P(None, "model"), P("model", None))

    @jax.jit
    def run(h, w):
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("model", None))(h, w)

    return run(
        jax.device_put(jnp.asarray(h), NamedSharding(mesh, specs[0])),
        jax.device_put(jnp.asarray(w), NamedSharding(mesh, specs[1])),
    )
