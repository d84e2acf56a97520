"""Mistake: the ZeRO step right, but Adam without its bias correction."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh

VERDICT = "fail"
PHRASE = "without Adam's bias correction"


def zero_adam_step(w, m, v, x, y, step, lr):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), NamedSharding(mesh, P("data", None)))

    def local(w, m, v, x, y):
        loss = lambda w: jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")  # noqa: E731
        g_own = jax.grad(loss)(jax.lax.pcast(w, "data", to="varying"))
        g = jax.lax.psum_scatter(g_own, "data", scatter_dimension=0, tiled=True)
        k = g.shape[0]
        w_rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * k, k)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g**2
        new_rows = w_rows - lr * m / (jnp.sqrt(v) + 1e-8)  # wrong: no bias correction
        return jax.lax.all_gather(new_rows, "data", axis=0, tiled=True, to="invarying"), m, v

    rows = P("data", None)
    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P(), rows, rows, rows, rows),
                      out_specs=(P(), rows, rows))
    )(w, m, v, x, y)
