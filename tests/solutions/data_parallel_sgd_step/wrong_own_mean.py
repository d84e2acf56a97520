"""Mistake: each device differentiates the mean of its own block (no pmean of the loss);
jax.grad's psum then adds n block gradients: a step n times too long on n devices."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "times the right one"
DEVICES = (8,)


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(x.shape[0])
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def local_step(w, b, x, y):
        loss = lambda w, b: jnp.mean((x @ w + b - y) ** 2)  # noqa: E731  wrong: own block
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
