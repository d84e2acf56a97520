"""check_vma=False: JAX neither sums gradients nor checks out_specs=P(), so the gradient is
written in closed form, each device's own part, then psum_scatter and all_gather;
step and lr passed into the program as arrays."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def zero_adam_step(w, m, v, x, y, step, lr):
    for a in (w, m, v, x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"w, m, v, x and y must be arrays, got {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"w, m, v, x and y must be floating-point, got {a.dtype}")
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be an int, got {step!r}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"lr must be a real number, got {lr!r}")
    if w.ndim != 2 or m.shape != w.shape or v.shape != w.shape or x.ndim != 2:
        raise ValueError("w, m and v must be (D, F) and x (N, D)")
    if x.shape[1] != w.shape[0] or y.shape != (x.shape[0], w.shape[1]):
        raise ValueError(f"shapes do not fit: w {w.shape}, x {x.shape}, y {y.shape}")
    if x.shape[0] == 0:
        raise ValueError("the batch is empty")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if not math.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    n_rows, f = x.shape[0], w.shape[1]
    mesh = data_mesh(math.gcd(n_rows, w.shape[0]))
    put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))  # noqa: E731
    w, m, v, x, y = put(w, P()), put(m, P("data")), put(v, P("data")), put(x, P("data")), put(y, P("data"))
    step, lr = put(jnp.float32(step), P()), put(jnp.float32(lr), P())

    def local(w, m, v, x, y, step, lr):
        g_own = 2.0 / (n_rows * f) * x.T @ (x @ w - y)  # this device's rows of the batch
        g = jax.lax.psum_scatter(g_own, "data", scatter_dimension=0, tiled=True)
        k = g.shape[0]
        w_rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * k, k)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g**2
        step_w = lr * (m / (1 - 0.9**step)) / (jnp.sqrt(v / (1 - 0.999**step)) + 1e-8)
        return jax.lax.all_gather(w_rows - step_w, "data", axis=0, tiled=True), m, v

    return jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(), P("data"), P("data"), P("data"), P("data"), P(), P()),
            out_specs=(P(), P("data"), P("data")),
            check_vma=False,
        )
    )(w, m, v, x, y, step, lr)
