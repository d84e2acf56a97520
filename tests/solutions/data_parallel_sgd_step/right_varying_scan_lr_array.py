"""Jitted shard_map with gradient accumulation: lax.scan over this device's rows, varying
copies of the parameters (pcast), one explicit pmean of the gradients; lr a jax Array."""

import math
import numbers

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _local_step(w, b, x, y, lr):
    n_local = x.shape[0]
    w_own, b_own = jax.lax.pcast((w, b), "data", to="varying")

    def add_row(total, row):
        xr, yr = row

        def loss(w, b):  # this row's share of this device's block mean
            return jnp.sum((xr @ w + b - yr) ** 2) / (n_local * yr.shape[-1])

        grads = jax.grad(loss, argnums=(0, 1))(w_own, b_own)  # no collective
        return jax.tree.map(jnp.add, total, grads), None

    zeros = (jnp.zeros_like(w_own), jnp.zeros_like(b_own))
    rows = (x[:, None, :], y[:, None, :])  # microbatches of one row each
    (dw, db), _ = jax.lax.scan(add_row, zeros, rows)
    dw, db = jax.lax.pmean((dw, db), "data")  # the one all-reduce: blocks are equal
    return (w - lr * dw).astype(w.dtype), (b - lr * db).astype(b.dtype)


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    if not all(isinstance(a, jax.Array) or type(a).__module__ == "numpy" for a in (w, b, x, y)):
        raise TypeError("w, b, x and y must be arrays")
    if not all(jnp.issubdtype(a.dtype, jnp.floating) for a in (w, b, x, y)):
        raise TypeError("w, b, x and y must be floating-point")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if math.isnan(lr) or math.isinf(lr):
        raise ValueError("lr must be finite")
    if w.ndim != 2 or b.shape != w.shape[1:] or x.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError("shapes do not fit together")
    if y.shape != (x.shape[0], w.shape[1]):
        raise ValueError("y's shape does not fit")
    if x.shape[0] == 0:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")

    mesh = data_mesh(x.shape[0])
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    w, b = jax.device_put((w, b), replicated)
    x, y = jax.device_put((x, y), rows)
    lr = jax.device_put(jnp.asarray(lr), replicated)  # weakly typed: keeps w's dtype
    step = jax.jit(
        jax.shard_map(
            _local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data"), P()),
            out_specs=(P(), P()),
        )
    )
    return step(w, b, x, y, lr)
