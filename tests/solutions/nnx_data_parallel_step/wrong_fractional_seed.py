"""Mistake: no argument checks, and int(seed) silently truncates a fractional seed (3.5
builds the model of seed 3) where the statement asks for a ValueError."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "ValueError"
DEVICES = (1, 8)


def nnx_data_parallel_step(seed: int, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))  # wrong: 3.5 -> 3
    mesh = data_mesh(x.shape[0])
    model = jax.device_put(model, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def train_step(model, x, y):
        optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
        loss_fn = lambda m: jax.lax.pmean(jnp.mean((m(x) - y) ** 2), "data")  # noqa: E731
        optimizer.update(model, nnx.grad(loss_fn)(model))
        return model.kernel[...], model.bias[...]

    return jax.jit(
        jax.shard_map(train_step, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
    )(model, x, y)
