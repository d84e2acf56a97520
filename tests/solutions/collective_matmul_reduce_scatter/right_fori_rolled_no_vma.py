"""Jitted shard_map with check_vma=False; a rolled jax.lax.fori_loop(0, n - 1) (a while loop in the program)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    import numpy as np

    if not isinstance(h, (np.ndarray, jax.Array)) or not isinstance(w, (np.ndarray, jax.Array)):
        raise TypeError("h and w must be arrays")
    if h.dtype == bool or w.dtype == bool or not (
        jnp.issubdtype(h.dtype, jnp.number) and jnp.issubdtype(w.dtype, jnp.number)
    ):
        raise TypeError(f"h and w must be numeric, got {h.dtype} and {w.dtype}")
    if h.ndim != 2 or w.ndim != 2:
        raise ValueError("h and w must be 2-D")
    if h.size == 0 or w.size == 0:
        raise ValueError("a dimension is 0")
    if w.shape[0] != h.shape[1]:
        raise ValueError("w must have F rows")

    mesh = axis_mesh("model", math.gcd(h.shape[0], h.shape[1]))
    n = mesh.shape["model"]
    perm = [(i, (i + 1) % n) for i in range(n)]

    def local(h_cols, w_rows):
        me = jax.lax.axis_index("model")
        rows = h_cols.shape[0] // n
        partials = (h_cols @ w_rows).reshape(n, rows, w_rows.shape[1])  # this device's share of every block

        def body(i, total):
            total = jax.lax.ppermute(total, "model", perm)
            return total + partials[(me - 2 - i) % n]

        return jax.lax.fori_loop(0, n - 1, body, partials[(me - 1) % n])

    specs = (P(None, "model"), P("model", None))
    h = jax.device_put(h, NamedSharding(mesh, specs[0]))
    w = jax.device_put(w, NamedSharding(mesh, specs[1]))
    f = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("model", None), check_vma=False)
    return jax.jit(f)(h, w)
