"""zero_adam_step in two jitted programs: the first reduce-scatters this device's gradient,
the second (jax.jit with donate_argnums for the gradient rows it consumes, an internal
array) applies Adam to the rows and all-gathers them, both with jax.shard_map."""
import math
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def _validate(w, m, v, x, y, step, lr):
    for a in (w, m, v, x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("array")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError("float")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError("step")
    if isinstance(lr, bool) or not isinstance(lr, (int, float, np.integer, np.floating)):
        raise TypeError("lr")
    if w.ndim != 2 or m.shape != w.shape or v.shape != w.shape:
        raise ValueError("w/m/v")
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != w.shape[0] or y.shape != (x.shape[0], w.shape[1]):
        raise ValueError("x/y")
    if x.shape[0] < 1 or w.shape[1] < 1:
        raise ValueError("empty")
    if step < 1 or not math.isfinite(float(lr)):
        raise ValueError("step/lr")


def zero_adam_step(w, m, v, x, y, step, lr):
    _validate(w, m, v, x, y, step, lr)
    N, D = x.shape
    F = w.shape[1]
    mesh = data_mesh(math.gcd(N, D))
    split = P("data", None)

    def grad_rows(w, x, y):
        wv = jax.lax.pcast(w, "data", to="varying")
        own = jax.grad(lambda a: jnp.sum((x @ a - y) ** 2) / (N * F))(wv)
        return jax.lax.psum_scatter(own, "data", scatter_dimension=0, tiled=True)

    def adam(g, w, m, v):
        k = g.shape[0]
        rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * k, k)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g ** 2
        new = rows - lr * (m / (1 - 0.9 ** step)) / (jnp.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
        return jax.lax.all_gather(new, "data", axis=0, tiled=True, to="invarying"), m, v

    first = jax.jit(jax.shard_map(grad_rows, mesh=mesh, in_specs=(P(), split, split),
                                  out_specs=split))
    second = jax.jit(jax.shard_map(adam, mesh=mesh, in_specs=(split, P(), split, split),
                                   out_specs=(P(), split, split)), donate_argnums=(0,))
    g = first(w, x, y)
    return second(g, w, m, v)
