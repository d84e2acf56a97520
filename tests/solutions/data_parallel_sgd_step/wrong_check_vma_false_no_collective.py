"""Mistake: check_vma=False with no collective at all: each device steps from its own
rows, and the "replicated" copies disagree from device to device."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "hold different values"
DEVICES = (8,)


def data_parallel_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(x.shape[0])
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def local_step(w, b, x, y):
        loss = lambda w, b: jnp.mean((x @ w + b - y) ** 2)  # noqa: E731
        dw, db = jax.grad(loss, argnums=(0, 1))(w, b)  # not summed: check_vma=False
        return w - lr * dw, b - lr * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data")),
            out_specs=(P(), P()),
            check_vma=False,
        )
    )(w, b, x, y)
