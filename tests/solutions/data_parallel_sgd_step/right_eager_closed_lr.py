"""Eager shard_map (no jax.jit), lr closed over as a Python float, value_and_grad."""

import math
import numbers

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    arrays = {"w": w, "b": b, "x": x, "y": y}
    for name, a in arrays.items():
        if not hasattr(a, "dtype") or not hasattr(a, "shape"):
            raise TypeError(f"{name} is not an array")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} has dtype {a.dtype}, not floating-point")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    lr = float(lr)
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if (w.ndim, b.ndim, x.ndim, y.ndim) != (2, 1, 2, 2):
        raise ValueError("wrong ranks")
    if b.shape[0] != w.shape[1] or x.shape[1] != w.shape[0] or y.shape != (x.shape[0], w.shape[1]):
        raise ValueError("shapes do not fit together")
    if x.shape[0] < 1:
        raise ValueError("empty batch")
    if y.shape[1] == 0:
        raise ValueError("no outputs: y has no columns")

    mesh = data_mesh(x.shape[0])
    w = jax.device_put(w, NamedSharding(mesh, P(None, None)))
    b = jax.device_put(b, NamedSharding(mesh, P(None)))
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    y = jax.device_put(y, NamedSharding(mesh, P("data", None)))

    def local_step(w, b, x, y):
        def loss(params):
            w, b = params
            return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

        _, (dw, db) = jax.value_and_grad(loss)((w, b))
        return w - lr * dw, b - lr * db  # lr: a Python float, closed over

    return jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(P(), P(), P("data"), P("data")),
        out_specs=(P(), P()),
    )(w, b, x, y)
