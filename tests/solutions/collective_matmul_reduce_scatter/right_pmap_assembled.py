"""jax.pmap over the "model" axis with jax.lax.ppermute inside (n - 1 hops in a Python loop);
pmap's per-device blocks of rows assembled with jax.make_array_from_single_device_arrays (no copy)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    if not isinstance(h, (np.ndarray, jax.Array)) or not isinstance(w, (np.ndarray, jax.Array)):
        raise TypeError("h and w must be arrays")
    if not jnp.issubdtype(h.dtype, jnp.number) or not jnp.issubdtype(w.dtype, jnp.number):
        raise TypeError("h and w must be numeric arrays")
    if h.ndim != 2 or w.ndim != 2 or 0 in h.shape or 0 in w.shape or w.shape[0] != h.shape[1]:
        raise ValueError(f"bad shapes {h.shape} @ {w.shape}")

    S, F = h.shape
    D = w.shape[1]
    mesh = axis_mesh("model", math.gcd(S, F))
    n = mesh.shape["model"]
    rows, cols = S // n, F // n
    devices = list(mesh.devices.flat)
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(h_cols, w_rows):  # h_cols (S, F/n), w_rows (F/n, D)
        me = jax.lax.axis_index("model")
        blocks = h_cols.reshape(n, rows, cols)
        total = blocks[(me - 1) % n] @ w_rows
        for step in range(n - 1):
            total = jax.lax.ppermute(total, "model", perm=to_next)
            total = total + blocks[(me - 2 - step) % n] @ w_rows
        return total

    # Device j gets column block j of h and row block j of w, as P(None, "model") / P("model", None) place them.
    h_stacked = jnp.asarray(h).reshape(S, n, cols).transpose(1, 0, 2)  # (n, S, F/n)
    w_stacked = jnp.asarray(w).reshape(n, cols, D)  # (n, F/n, D)
    out = jax.pmap(local, axis_name="model", devices=devices)(h_stacked, w_stacked)  # (n, S/n, D)
    shards = [out[j] for j in range(n)]  # block j of rows, on device j already
    shards = [jax.device_put(block, d) for block, d in zip(shards, devices)]
    return jax.make_array_from_single_device_arrays((S, D), NamedSharding(mesh, P("model", None)), shards)
