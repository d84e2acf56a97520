"""Jitted shard_map with the nnx.Linear itself as a replicated pytree; nnx.Optimizer built
inside the step, lr closed over as a Python float, the loss pmean'd over "data"."""

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length


def _validate(seed, x, y, lr):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Real):
        raise TypeError(f"seed must be a number, got {type(seed).__name__}")
    if not float(seed).is_integer():
        raise ValueError(f"seed must be a whole number, got {seed}")
    for name, a in (("x", x), ("y", y)):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError(f"{name} must be an array, got {type(a).__name__}")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError(f"{name} must be floating-point, got {a.dtype}")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"lr must be a real number, got {type(lr).__name__}")
    if not math.isfinite(lr):
        raise ValueError(f"lr must be finite, got {lr}")
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"shapes do not fit: x {x.shape}, y {y.shape}")
    if 0 in x.shape or 0 in y.shape:
        raise ValueError(f"empty batch, input or output: x {x.shape}, y {y.shape}")


def nnx_data_parallel_step(seed: int, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    _validate(seed, x, y, lr)
    lr = float(lr)
    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))
    mesh = data_mesh(x.shape[0])
    model = jax.device_put(model, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def train_step(model, x, y):
        optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)

        def loss_fn(model):
            return jax.lax.pmean(jnp.mean((model(x) - y) ** 2), "data")

        optimizer.update(model, nnx.grad(loss_fn)(model))  # grads already summed
        return model.kernel[...], model.bias[...]

    return jax.jit(
        jax.shard_map(
            train_step,
            mesh=mesh,
            in_specs=(P(), P("data"), P("data")),
            out_specs=(P(), P()),
        )
    )(model, x, y)
