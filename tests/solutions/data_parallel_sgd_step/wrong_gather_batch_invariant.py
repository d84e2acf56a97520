"""Mistake: the batch all-gathered onto every device, typed invariant, the whole step
computed on each: right values, but an all-gather of the data, no all-reduce."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no all-reduce"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(x.shape[0])
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def local_step(w, b, x, y):
        x = jax.lax.all_gather(x, "data", axis=0, tiled=True, to="invarying")  # wrong
        y = jax.lax.all_gather(y, "data", axis=0, tiled=True, to="invarying")
        loss = lambda w, b: jnp.mean((x @ w + b - y) ** 2)  # noqa: E731
        dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
        return w - lr * dw, b - lr * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data")),
            out_specs=(P(), P()),
        )
    )(w, b, x, y)
