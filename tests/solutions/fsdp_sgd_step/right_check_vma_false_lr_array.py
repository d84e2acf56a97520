"""Jitted shard_map with check_vma=False: the loss normalised by the whole batch's size,
jax.grad through all_gather (its transpose reduce-scatters), a psum of b's gradient; lr a jax Array."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    if not all(isinstance(a, (jax.Array, np.ndarray)) for a in (w, b, x, y)):
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

    batch, d_out = y.shape
    mesh = data_mesh(math.gcd(batch, w.shape[0]))
    rows, copied = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P())
    w, b = jax.device_put(w, rows), jax.device_put(b, copied)
    x, y = jax.device_put((x, y), rows)
    lr = jax.device_put(jnp.asarray(lr, jnp.float32), copied)  # a strongly typed array

    def local_step(w_rows, b, x, y, lr):
        def loss(w_rows, b):  # this device's share of the whole batch's mean
            w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
            return jnp.sum((x @ w + b - y) ** 2) / (batch * d_out)

        dw_rows, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)
        db = jax.lax.psum(db, "data")  # without vma types, jax.grad leaves b's unsummed
        new_w = (w_rows - lr * dw_rows).astype(w_rows.dtype)
        new_b = (b - lr * db).astype(b.dtype)
        return new_w, new_b

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None), P()),
            out_specs=(P("data", None), P()),
            check_vma=False,
        )
    )(w, b, x, y, lr)
