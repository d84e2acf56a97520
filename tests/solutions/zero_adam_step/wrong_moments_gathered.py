"""Mistake: the gradient reduce-scattered, but then gathered whole with m and v, and Adam
applied to the whole w on every device (each device slicing its rows of m and v back):
right values and the asked-for collectives, but three more all-gathers' bytes, and the moments
leave their devices (the rule of what stays on its devices)."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh

VERDICT = "technique"
PHRASE = "travels between devices"
DEVICES = (8,)  # on one device nothing is sent


def zero_adam_step(w, m, v, x, y, step, lr):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), NamedSharding(mesh, P("data", None)))

    def local(w, m, v, x, y):
        loss = lambda w: jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")  # noqa: E731
        g_own = jax.grad(loss)(jax.lax.pcast(w, "data", to="varying"))
        g_rows = jax.lax.psum_scatter(g_own, "data", scatter_dimension=0, tiled=True)
        gather = lambda a: jax.lax.all_gather(a, "data", axis=0, tiled=True, to="invarying")  # noqa: E731
        g, m_all, v_all = gather(g_rows), gather(m), gather(v)  # wrong: whole on every device
        m_all = 0.9 * m_all + 0.1 * g
        v_all = 0.999 * v_all + 0.001 * g**2
        new_w = w - lr * (m_all / (1 - 0.9**step)) / (jnp.sqrt(v_all / (1 - 0.999**step)) + 1e-8)
        k = m.shape[0]
        start = jax.lax.axis_index("data") * k
        mine = lambda a: jax.lax.dynamic_slice_in_dim(a, start, k)  # noqa: E731
        return new_w, mine(m_all), mine(v_all)

    rows = P("data", None)
    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P(), rows, rows, rows, rows),
                      out_specs=(P(), rows, rows))
    )(w, m, v, x, y)
