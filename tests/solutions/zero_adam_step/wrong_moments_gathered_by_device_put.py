"""Mistake: m and v gathered whole by a jax.device_put to P() before the shard_map, the gradient
reduce-scattered then all-gathered whole, and Adam on every row on every device: the moments
move between devices outside any program."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "m or v (Adam's moments) travels"
DEVICES = (8,)  # on one device nothing moves


def zero_adam_step(w, m, v, x, y, step, lr):
    for a in (w, m, v, x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("w, m, v, x and y must be arrays")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"expected floating-point arrays, got {a.dtype}")
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError("step must be a whole number (an int)")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if step < 1:
        raise ValueError("step counts from 1")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if w.ndim != 2 or x.ndim != 2 or m.shape != w.shape or v.shape != w.shape:
        raise ValueError("w, m and v must be (D, F), x (N, D)")
    if x.shape[1] != w.shape[0] or y.shape != (x.shape[0], w.shape[1]):
        raise ValueError("shapes do not fit together")
    if x.shape[0] == 0:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    rows = NamedSharding(mesh, P("data", None))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), rows)

    n = mesh.shape["data"]
    # the moments gathered whole onto every device, by resharding them outside the program
    m_all, v_all = jax.device_put((m, v), NamedSharding(mesh, P()))

    def local(w, m_all, v_all, x, y):
        def loss(w):
            return jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")

        g_own = jax.grad(loss)(jax.lax.pcast(w, "data", to="varying"))
        g_rows = jax.lax.psum_scatter(g_own, "data", scatter_dimension=0, tiled=True)
        g = jax.lax.all_gather(g_rows, "data", axis=0, tiled=True, to="invarying")  # whole gradient
        # Adam on every row, on every device
        m = 0.9 * m_all + 0.1 * g
        v = 0.999 * v_all + 0.001 * g * g
        m_hat = m / (1 - 0.9**step)
        v_hat = v / (1 - 0.999**step)
        new_w = w - lr * m_hat / (jnp.sqrt(v_hat) + 1e-8)
        k = w.shape[0] // n
        i = jax.lax.axis_index("data")
        return (
            new_w,
            jax.lax.dynamic_slice_in_dim(m, i * k, k),
            jax.lax.dynamic_slice_in_dim(v, i * k, k),
        )

    split = P("data", None)
    return jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(), P(), P(), split, split),
            out_specs=(P(), split, split),
        )
    )(w, m_all, v_all, x, y)
