"""Mistake: each device's own block mean as the loss (no pmean): jax.grad sums the n
block gradients, a step n times too long on n devices."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "times the right one"
DEVICES = (8,)


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data", None)))

    def local_step(w_rows, b, x, y):
        def loss(w_rows, b):
            w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
            return jnp.mean((x @ w + b - y) ** 2)  # wrong: this device's rows only

        dw_rows, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)
        return w_rows - lr * dw_rows, b - lr * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None)),
            out_specs=(P("data", None), P()),
        )
    )(w, b, x, y)
