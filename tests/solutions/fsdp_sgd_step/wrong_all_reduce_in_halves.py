"""Mistake: w's gradient all-reduced whole in two halves (each under w's size, kept apart by an
optimization barrier, which XLA would otherwise merge) and sliced, the reduce-scatter done on
b's zero-padded gradient instead."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "all-reduced whole"  # jax 0.10's XLA merges the halves into one all-reduce
DEVICES = (8,)  # on one device there is nothing to reduce


def fsdp_sgd_step(
    w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    for a in (w, b, x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"expected an array, got {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"expected floating-point, got {a.dtype}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if [w.ndim, b.ndim, x.ndim, y.ndim] != [2, 1, 2, 2]:
        raise ValueError("wrong rank")
    (d_in, d_out), batch = w.shape, x.shape[0]
    if b.shape != (d_out,) or x.shape != (batch, d_in) or y.shape != (batch, d_out):
        raise ValueError("shapes do not fit together")
    if batch == 0:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")

    mesh = data_mesh(math.gcd(batch, d_in))
    w = jax.device_put(w, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data", None)))
    scale = 2.0 / (batch * d_out)
    lr_w, lr_b = np.asarray(lr, w.dtype), np.asarray(lr, b.dtype)

    n = mesh.shape["data"]
    k = -(-d_out // n)

    def local_step(w_rows, b, x, y):
        i = jax.lax.axis_index("data")
        w_whole = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
        r = x @ w_whole + b - y
        partial_dw = (x.T @ r).reshape(-1)
        half = partial_dw.size // 2
        # w's gradient all-reduced whole, in two halves (each under w's size)
        first = jax.lax.psum(partial_dw[:half], "data")
        first, rest = jax.lax.optimization_barrier((first, partial_dw[half:]))  # not combined
        dw = jnp.concatenate([first, jax.lax.psum(rest, "data")]).reshape(d_in, d_out)
        dw_rows = jax.lax.dynamic_slice_in_dim(dw, i * (d_in // n), d_in // n, 0)
        # the asked reduce-scatter, on b's gradient (padded), gathered back
        db = jnp.zeros(n * k, r.dtype).at[:d_out].set(r.sum(axis=0))
        db = jax.lax.all_gather(jax.lax.psum_scatter(db, "data", tiled=True), "data", tiled=True)[
            :d_out
        ]
        dw_rows = (scale * dw_rows).astype(w_rows.dtype)
        db = (scale * db).astype(b.dtype)
        return w_rows - lr_w * dw_rows, b - lr_b * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None)),
            out_specs=(P("data", None), P()),
            check_vma=False,
        )
    )(w, b, x, y)
