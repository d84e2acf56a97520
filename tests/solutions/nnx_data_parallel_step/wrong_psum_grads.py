"""Mistake: the pmap recipe, a psum of the gradient State on top of the own-block loss:
summed twice, a step n * n times too long on n devices."""

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "fail"
PHRASE = "times the right one"
DEVICES = (8,)


def nnx_data_parallel_step(seed: int, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))
    mesh = data_mesh(x.shape[0])
    model = jax.device_put(model, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def train_step(model, x, y):
        optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
        grads = nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        grads = jax.lax.psum(grads, "data")  # wrong: summed a second time
        optimizer.update(model, grads)
        return model.kernel[...], model.bias[...]

    return jax.jit(
        jax.shard_map(train_step, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P()))
    )(model, x, y)
