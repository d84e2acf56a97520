"""Jitted shard_map: the loss's gradient with respect to w cast to varying (this device's
own part), one psum_scatter of it, Adam on this device's rows, all_gather to invarying."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def zero_adam_step(w, m, v, x, y, step, lr):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    rows = NamedSharding(mesh, P("data", None))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), rows)

    def local(w, m, v, x, y):
        def loss(w):
            return jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")

        g_own = jax.grad(loss)(jax.lax.pcast(w, "data", to="varying"))
        g = jax.lax.psum_scatter(g_own, "data", scatter_dimension=0, tiled=True)
        k = g.shape[0]
        w_rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * k, k)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        m_hat = m / (1 - 0.9**step)
        v_hat = v / (1 - 0.999**step)
        new_rows = w_rows - lr * m_hat / (jnp.sqrt(v_hat) + 1e-8)
        new_w = jax.lax.all_gather(new_rows, "data", axis=0, tiled=True, to="invarying")
        return new_w, m, v

    split = P("data", None)
    return jax.jit(
        jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(), split, split, split, split),
            out_specs=(P(), split, split),
        )
    )(w, m, v, x, y)
