"""Jitted shard_map with check_vma=False; a rolled jax.lax.fori_loop(0, n - 1) (a while loop in the program)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    import numpy as np

    if not isinstance(x, (np.ndarray, jax.Array)) or not isinstance(w, (np.ndarray, jax.Array)):
        raise TypeError("x and w must be arrays")
    if x.dtype == bool or w.dtype == bool or not (
        jnp.issubdtype(x.dtype, jnp.number) and jnp.issubdtype(w.dtype, jnp.number)
    ):
        raise TypeError(f"x and w must be numeric, got {x.dtype} and {w.dtype}")
    if x.ndim != 2 or w.ndim != 2:
        raise ValueError("x and w must be 2-D")
    if x.size == 0 or w.size == 0:
        raise ValueError("a dimension is 0")
    if w.shape[0] != x.shape[1]:
        raise ValueError("w must have D rows")

    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    n = mesh.shape["model"]
    perm = [(i, (i - 1) % n) for i in range(n)]
    dtype = jnp.result_type(x, w)

    def local(x_block, w_cols):
        me = jax.lax.axis_index("model")
        rows = x_block.shape[0]
        out = jnp.zeros((n, rows, w_cols.shape[1]), dtype)
        out = out.at[me].set(x_block @ w_cols)

        def body(i, carry):
            out, block = carry
            block = jax.lax.ppermute(block, "model", perm)
            out = out.at[(me + i + 1) % n].set(block @ w_cols)
            return out, block

        out, _ = jax.lax.fori_loop(0, n - 1, body, (out, x_block))
        return out.reshape(n * rows, w_cols.shape[1])

    specs = (P("model", None), P(None, "model"))
    x = jax.device_put(x, NamedSharding(mesh, specs[0]))
    w = jax.device_put(w, NamedSharding(mesh, specs[1]))
    f = jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P(None, "model"), check_vma=False)
    )
    return f(x, w)
