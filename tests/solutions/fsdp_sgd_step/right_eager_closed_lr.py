"""Eager shard_map (no jax.jit), value_and_grad over a pair of parameters, lr closed over
as a Python float."""

import math
import numbers

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    for name, a in {"w": w, "b": b, "x": x, "y": y}.items():
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

    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    rows = NamedSharding(mesh, P("data", None))
    w = jax.device_put(w, rows)
    b = jax.device_put(b, NamedSharding(mesh, P(None)))
    x = jax.device_put(x, rows)
    y = jax.device_put(y, rows)

    def local_step(w_rows, b, x, y):
        def loss(params):
            w_rows, b = params
            w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
            return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

        _, (dw_rows, db) = jax.value_and_grad(loss)((w_rows, b))
        return w_rows - lr * dw_rows, b - lr * db

    return jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(P("data", None), P(), P("data", None), P("data", None)),
        out_specs=(P("data", None), P()),
    )(w, b, x, y)
