"""Jitted shard_map, the loss pmean'd over "data", lr passed in as a replicated operand;
jax.grad's own psum for the replicated parameters is the step's one all-reduce."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _validate(w, b, x, y, lr):
    for name, a in (("w", w), ("b", b), ("x", x), ("y", y)):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"{name} must be an array, got {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point, got {a.dtype}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"lr must be a real number, got {type(lr).__name__}")
    if not math.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    if w.ndim != 2 or b.ndim != 1 or x.ndim != 2 or y.ndim != 2:
        raise ValueError("w, x and y must be 2-D and b 1-D")
    d_in, d_out = w.shape
    batch = x.shape[0]
    if b.shape != (d_out,) or x.shape[1] != d_in or y.shape != (batch, d_out):
        raise ValueError(
            f"shapes do not fit: w {w.shape}, b {b.shape}, x {x.shape}, y {y.shape}"
        )
    if batch == 0:
        raise ValueError("the batch is empty")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")


def _local_step(w, b, x, y, lr):
    def loss(w, b):
        block = jnp.mean((x @ w + b - y) ** 2)  # this device's rows
        return jax.lax.pmean(block, "data")  # the whole batch's mean

    dw, db = jax.grad(loss, argnums=(0, 1))(w, b)  # already summed over "data"
    return w - lr * dw, b - lr * db


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    _validate(w, b, x, y, lr)
    mesh = data_mesh(x.shape[0])
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    step = jax.jit(
        jax.shard_map(
            _local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data"), P()),
            out_specs=(P(), P()),
        )
    )
    return step(w, b, x, y, float(lr))
