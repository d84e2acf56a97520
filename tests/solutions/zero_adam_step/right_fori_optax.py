"""Jitted, the gradient accumulated row by row in a lax.fori_loop (w cast to varying), one
psum_scatter, then optax.adam's own update on this device's rows (its count: step - 1)."""

import math

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def zero_adam_step(w, m, v, x, y, step, lr):
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
