"""Mistake: data parallelism's gradient (jax.grad of the replicated w, all-reduced whole),
then each device slices the rows whose moments it keeps: right values, no reduce-scatter."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh

VERDICT = "technique"
PHRASE = "no reduce-scatter"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def zero_adam_step(w, m, v, x, y, step, lr):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), NamedSharding(mesh, P("data", None)))

    def local(w, m, v, x, y):
        loss = lambda w: jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")  # noqa: E731
        g_whole = jax.grad(loss)(w)  # wrong: summed over the devices, an all-reduce
        k = m.shape[0]
        start = jax.lax.axis_index("data") * k
        g = jax.lax.dynamic_slice_in_dim(g_whole, start, k)
        w_rows = jax.lax.dynamic_slice_in_dim(w, start, k)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g**2
        new_rows = w_rows - lr * (m / (1 - 0.9**step)) / (jnp.sqrt(v / (1 - 0.999**step)) + 1e-8)
        return jax.lax.all_gather(new_rows, "data", axis=0, tiled=True, to="invarying"), m, v

    rows = P("data", None)
    return jax.jit(
        jax.shard_map(local, mesh=mesh, in_specs=(P(), rows, rows, rows, rows),
                      out_specs=(P(), rows, rows))
    )(w, m, v, x, y)
