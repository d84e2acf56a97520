"""Jitted shard_map, no autodiff: the closed-form gradient, an explicit all_gather of w and
psum_scatter(tiled=True) of its gradient, a psum for b's; lr a NumPy scalar."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
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

    def local_step(w_rows, b, x, y):
        w_whole = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
        r = x @ w_whole + b - y  # this device's residuals
        partial_dw = x.T @ r  # this device's examples, every row of w
        dw_rows = jax.lax.psum_scatter(partial_dw, "data", scatter_dimension=0, tiled=True)
        db = jax.lax.psum(r.sum(axis=0), "data")
        dw_rows = (scale * dw_rows).astype(w_rows.dtype)
        db = (scale * db).astype(b.dtype)
        return w_rows - lr_w * dw_rows, b - lr_b * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None)),
            out_specs=(P("data", None), P()),
        )
    )(w, b, x, y)
