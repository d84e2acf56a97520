"""Jitted shard_map; the ring is a jax.lax.scan of n - 1 hops, blocks sent to the NEXT device (i -> i + 1)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    for a in (x, w):
        if not hasattr(a, "dtype") or not hasattr(a, "ndim") or isinstance(a, (list, tuple)):
            raise TypeError(f"expected an array, got {type(a).__name__}")
        if not (jnp.issubdtype(a.dtype, jnp.integer) or jnp.issubdtype(a.dtype, jnp.inexact)):
            raise TypeError(f"expected a numeric array, got dtype {a.dtype}")
    if x.ndim != 2 or w.ndim != 2:
        raise ValueError("x and w must be 2-D")
    if min(x.shape) == 0 or min(w.shape) == 0:
        raise ValueError("no dimension may be 0")
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"shapes {x.shape} and {w.shape} do not fit together")

    S, F = x.shape[0], w.shape[1]
    mesh = axis_mesh("model", math.gcd(S, F))
    n = mesh.shape["model"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    @jax.jit
    def run(x, w):
        def local(x_block, w_cols):
            me = jax.lax.axis_index("model")
            rows = x_block.shape[0]
            first = x_block @ w_cols
            out = jnp.zeros((n * rows, w_cols.shape[1]), first.dtype)
            out = jax.lax.dynamic_update_slice_in_dim(out, first, me * rows, axis=0)

            def step(carry, k):
                out, block = carry
                block = jax.lax.ppermute(block, "model", perm=to_next)
                held = (me - k) % n  # after k hops forward, the block of device me - k
                out = jax.lax.dynamic_update_slice_in_dim(out, block @ w_cols, held * rows, axis=0)
                return (out, block), None

            (out, _), _ = jax.lax.scan(step, (out, x_block), jnp.arange(1, n))
            return out

        return jax.shard_map(
            local, mesh=mesh, in_specs=(P("model", None), P(None, "model")), out_specs=P(None, "model")
        )(x, w)

    x = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("model", None)))
    w = jax.device_put(jnp.asarray(w), NamedSharding(mesh, P(None, "model")))
    return run(x, w)
