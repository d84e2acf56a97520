"""Jitted shard_map with check_vma=False: each device's gradient of its own block's
mean, then pmean of the gradients (the pmap recipe, legal without vma); lr a NumPy scalar."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    for a in (w, b, x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"expected an array, got {type(a).__name__}")
        if not np.issubdtype(a.dtype, np.floating) and not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"expected floating-point, got {a.dtype}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if [w.ndim, b.ndim, x.ndim, y.ndim] != [2, 1, 2, 2]:
        raise ValueError("wrong rank")
    (d_in, d_out), batch = w.shape, x.shape[0]
    if b.shape != (d_out,) or x.shape != (batch, d_in) or y.shape != (batch, d_out):
        raise ValueError("shapes do not fit together")
    if batch == 0:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")

    mesh = data_mesh(batch)
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    lr_w = np.asarray(lr, dtype=w.dtype)  # NumPy scalars, in each parameter's dtype
    lr_b = np.asarray(lr, dtype=b.dtype)

    def local_step(w, b, x, y):
        def own_loss(w, b):
            return jnp.mean((x @ w + b - y) ** 2)  # this device's block only

        # check_vma=False: jax.grad does not sum over "data", so average by hand
        grads = jax.grad(own_loss, argnums=(0, 1))(w, b)
        dw, db = jax.lax.pmean(grads, "data")
        return w - lr_w * dw, b - lr_b * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data")),
            out_specs=(P(), P()),
            check_vma=False,
        )
    )(w, b, x, y)
