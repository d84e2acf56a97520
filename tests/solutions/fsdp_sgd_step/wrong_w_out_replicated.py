"""Mistake: the right FSDP step, but the new w gathered and returned whole on every
device (out_specs=P()) where it must leave split by rows."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "placement"
PHRASE = "every device holds the whole result"
DEVICES = (8,)


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data", None)))

    def local_step(w_rows, b, x, y):
        def loss(w_rows, b):
            w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
            return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

        dw_rows, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)
        new_rows = w_rows - lr * dw_rows
        new_w = jax.lax.all_gather(new_rows, "data", axis=0, tiled=True, to="invarying")  # wrong
        return new_w, b - lr * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None)),
            out_specs=(P(), P()),
        )
    )(w, b, x, y)
