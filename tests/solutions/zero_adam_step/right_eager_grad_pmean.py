"""Eager shard_map (no jax.jit): each operation runs as its own program. The gradient of
the pmean loss with respect to a varying copy of w, psum_scatter, Adam, all_gather."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def zero_adam_step(w, m, v, x, y, step, lr):
    arrays = (w, m, v, x, y)
    if not all(isinstance(a, (jax.Array, np.ndarray)) for a in arrays):
        raise TypeError("w, m, v, x and y must be arrays")
    if not all(jnp.issubdtype(a.dtype, jnp.floating) for a in arrays):
        raise TypeError("w, m, v, x and y must be floating-point")
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError("step must be an int")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if w.ndim != 2 or m.shape != w.shape or v.shape != w.shape:
        raise ValueError("w, m and v must have one shape (D, F)")
    if x.ndim != 2 or x.shape[1] != w.shape[0] or y.shape != (x.shape[0], w.shape[1]):
        raise ValueError("x must be (N, D) and y (N, F)")
    if x.shape[0] == 0 or step < 1 or not math.isfinite(lr) or y.shape[1] == 0:
        raise ValueError("an empty batch or output, a step below 1 or an lr that is not finite")
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = (jax.device_put(a, NamedSharding(mesh, P("data"))) for a in (m, v, x, y))
    b1, b2, eps = 0.9, 0.999, 1e-8

    def local(w, m, v, x, y):
        loss = lambda w: jax.lax.pmean(((x @ w - y) ** 2).mean(), "data")  # noqa: E731
        g = jax.lax.psum_scatter(
            jax.grad(loss)(jax.lax.pcast(w, "data", to="varying")), "data", tiled=True
        )
        i = jax.lax.axis_index("data")
        w_rows = jax.lax.dynamic_slice_in_dim(w, i * g.shape[0], g.shape[0])
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * jnp.square(g)
        update = (m / (1 - b1**step)) / (jnp.sqrt(v / (1 - b2**step)) + eps)
        return jax.lax.all_gather(w_rows - lr * update, "data", tiled=True, to="invarying"), m, v

    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), P("data"), P("data"), P("data"), P("data")),
        out_specs=(P(), P("data"), P("data")),
    )(w, m, v, x, y)
