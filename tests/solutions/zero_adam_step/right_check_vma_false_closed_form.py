"""check_vma=False: JAX neither sums gradients nor checks out_specs=P(), so the gradient is
written in closed form, each device's own part, then psum_scatter and all_gather;
step and lr passed into the program as arrays."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def zero_adam_step(w, m, v, x, y, step, lr):
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
