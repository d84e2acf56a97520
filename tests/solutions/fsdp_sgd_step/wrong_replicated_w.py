"""Mistake: the data-parallel step, w copied whole to every device: right values, split
by rows only afterwards; w's gradient all-reduced whole, no all-gather, no reduce-scatter."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no all-gather"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))  # wrong for w
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data", None)))

    def local_step(w, b, x, y):
        def loss(w, b):
            return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

        dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
        return w - lr * dw, b - lr * db

    new_w, new_b = jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data", None), P("data", None)),
            out_specs=(P(), P()),
        )
    )(w, b, x, y)
    return jax.device_put(new_w, NamedSharding(mesh, P("data", None))), new_b  # split after
