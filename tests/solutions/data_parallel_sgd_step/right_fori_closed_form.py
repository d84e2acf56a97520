"""Jitted shard_map, no autodiff: the closed-form gradient summed row by row with
lax.fori_loop, one psum of the partial sums; lr closed over."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    for a in (w, b, x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("arguments must be arrays")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError("arguments must be floating-point")
    if not isinstance(lr, numbers.Real) or isinstance(lr, bool):
        raise TypeError("lr must be a real number")
    if not math.isfinite(lr):
        raise ValueError("lr is nan or infinite")
    if w.ndim != 2 or b.ndim != 1 or x.ndim != 2 or y.ndim != 2:
        raise ValueError("rank")
    batch, d_in = x.shape
    d_out = w.shape[1]
    if w.shape[0] != d_in or b.shape[0] != d_out or y.shape != (batch, d_out):
        raise ValueError("shapes do not fit together")
    if batch < 1:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")

    mesh = data_mesh(batch)
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    scale = 2.0 / (batch * d_out)
    compute = jnp.result_type(x, w, b, y)

    def local_step(w, b, x, y):
        def add_row(i, sums):
            gw, gb = sums
            r = x[i] @ w + b - y[i]  # this row's residual, (d_out,)
            return gw + jnp.outer(x[i], r).astype(compute), gb + r.astype(compute)

        zeros = (jnp.zeros((d_in, d_out), compute), jnp.zeros((d_out,), compute))
        zeros = jax.lax.pcast(zeros, "data", to="varying")
        gw, gb = jax.lax.fori_loop(0, x.shape[0], add_row, zeros)
        gw, gb = jax.lax.psum((gw, gb), "data")  # the one all-reduce
        dw = (scale * gw).astype(w.dtype)
        db = (scale * gb).astype(b.dtype)
        return w - lr * dw, b - lr * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data")),
            out_specs=(P(), P()),
        )
    )(w, b, x, y)
