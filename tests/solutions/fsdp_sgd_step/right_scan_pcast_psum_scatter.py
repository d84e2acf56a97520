"""Jitted shard_map with gradient accumulation: w gathered once (typed varying), lax.scan
over this device's rows, b cast varying (pcast), then one psum_scatter of w's gradient."""

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

    mesh = data_mesh(math.gcd(batch, d_in))
    w = jax.device_put(w, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data", None)))

    def local_step(w_rows, b, x, y):
        # all_gather's result is typed varying (to="varying", its default), and b is
        # cast to varying: their gradients stay this device's own, no collective yet
        w_own = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True, to="varying")
        b_own = jax.lax.pcast(b, "data", to="varying")

        def add_row(total, row):
            xr, yr = row
            loss = lambda w, b: jnp.sum((xr @ w + b - yr) ** 2) / (batch * d_out)  # noqa: E731
            grads = jax.grad(loss, argnums=(0, 1))(w_own, b_own)
            return jax.tree.map(jnp.add, total, grads), None

        zeros = (jnp.zeros_like(w_own), jnp.zeros_like(b_own))
        (dw, db), _ = jax.lax.scan(add_row, zeros, (x[:, None, :], y[:, None, :]))
        dw_rows = jax.lax.psum_scatter(dw, "data", scatter_dimension=0, tiled=True)
        db = jax.lax.psum(db, "data")
        return w_rows - lr * dw_rows, b - lr * db  # lr: a Python float, closed over

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None)),
            out_specs=(P("data", None), P()),
        )
    )(w, b, x, y)
