"""Jitted, the gradient accumulated row by row in a lax.fori_loop (w cast to varying), one
psum_scatter, then optax.adam's own update on this device's rows (its count: step - 1)."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def _check(w, m, v, x, y, step, lr):
    for name, a in zip("wmvxy", (w, m, v, x, y)):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"{name} must be an array, not {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point, not {a.dtype}")
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be an int, not {type(step).__name__}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"lr must be a real number, not {type(lr).__name__}")
    if w.ndim != 2 or x.ndim != 2 or m.shape != w.shape or v.shape != w.shape:
        raise ValueError(f"w, m, v must be (D, F) and x (N, D): {w.shape}, {m.shape}, {v.shape}, {x.shape}")
    if x.shape[1] != w.shape[0] or y.shape != (x.shape[0], w.shape[1]):
        raise ValueError(f"x {x.shape} and y {y.shape} do not fit w {w.shape}")
    if x.shape[0] == 0:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")
    if step < 1:
        raise ValueError("step must be at least 1")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")


def zero_adam_step(w, m, v, x, y, step, lr):
    _check(w, m, v, x, y, step, lr)
    total, f = x.shape[0], w.shape[1]
    mesh = data_mesh(math.gcd(total, w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), NamedSharding(mesh, P("data", None)))
    adam = optax.adam(lr, b1=0.9, b2=0.999, eps=1e-8)

    def local(w, m, v, x, y):
        w_own = jax.lax.pcast(w, "data", to="varying")

        def add_row(i, g):
            row_loss = lambda w: jnp.sum((x[i] @ w - y[i]) ** 2) / (total * f)  # noqa: E731
            return g + jax.grad(row_loss)(w_own)

        g_own = jax.lax.fori_loop(0, x.shape[0], add_row, jnp.zeros_like(w_own))
        g = jax.lax.psum_scatter(g_own, "data", scatter_dimension=0, tiled=True)
        k = g.shape[0]
        w_rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * k, k)
        adam_state, *rest = adam.init(w_rows)  # then Adam's state as it stands at step - 1
        count = jnp.asarray(step - 1, jnp.int32)
        state = (adam_state._replace(count=count, mu=m, nu=v), *rest)
        updates, (adam_state, *_) = adam.update(g, state, w_rows)
        new_rows = optax.apply_updates(w_rows, updates)
        new_w = jax.lax.all_gather(new_rows, "data", axis=0, tiled=True, to="invarying")
        return new_w, adam_state.mu, adam_state.nu

    rows = P("data", None)
    return jax.jit(
        jax.shard_map(
            local, mesh=mesh, in_specs=(P(), rows, rows, rows, rows), out_specs=(P(), rows, rows)
        )
    )(w, m, v, x, y)
