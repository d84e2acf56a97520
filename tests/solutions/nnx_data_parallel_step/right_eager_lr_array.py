"""Eager shard_map (no jax.jit), the model as a pytree, nnx.value_and_grad, and lr passed
in as a replicated jax Array that optax.sgd takes as its learning rate."""

import math
import numbers

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def nnx_data_parallel_step(seed: int, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Real):
        raise TypeError("seed must be a number")
    if not math.isfinite(seed) or seed != math.floor(seed):
        raise ValueError("seed must be a whole number")
    for name, a in (("x", x), ("y", y)):
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):
            raise TypeError(f"{name} is not an array")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} is {a.dtype}, not floating-point")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if (x.ndim, y.ndim) != (2, 2) or x.shape[0] != y.shape[0]:
        raise ValueError("shapes do not fit together")
    if min(x.shape + y.shape) == 0:
        raise ValueError("empty batch, input or output")

    model = nnx.Linear(x.shape[1], y.shape[1], rngs=nnx.Rngs(int(seed)))
    mesh = data_mesh(x.shape[0])
    copied = NamedSharding(mesh, P())
    model = jax.device_put(model, copied)
    x = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    y = jax.device_put(y, NamedSharding(mesh, P("data", None)))
    lr = jax.device_put(jnp.asarray(lr, jnp.float32), copied)

    def train_step(model, x, y, lr):
        optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)

        def loss_fn(model):
            block = jnp.mean((model(x) - y) ** 2)
            return jax.lax.pmean(block, "data")

        _, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return model.kernel[...], model.bias[...]

    return jax.shard_map(
        train_step,
        mesh=mesh,
        in_specs=(P(), P("data"), P("data"), P()),
        out_specs=(P(), P()),
    )(model, x, y, lr)
