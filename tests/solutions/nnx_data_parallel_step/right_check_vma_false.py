"""Jitted shard_map with check_vma=False: each device's gradient of its own block's mean,
a pmean of the gradients (legal without vma types), then optimizer.update."""

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


def nnx_data_parallel_step(seed: int, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Real):
        raise TypeError("seed must be a number")
    if not float(seed).is_integer():
        raise ValueError("seed must be a whole number")
    for a in (x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("x and y must be arrays")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError("x and y must be floating-point")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError("shapes do not fit together")
    if x.shape[0] == 0 or x.shape[1] == 0 or y.shape[1] == 0:
        raise ValueError("empty batch, input or output")

    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))
    mesh = data_mesh(x.shape[0])
    model = jax.device_put(model, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))

    def train_step(model, x, y, lr):
        optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
        grads = nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)  # this block's
        grads = jax.lax.pmean(grads, "data")  # check_vma=False: not summed by jax.grad
        optimizer.update(model, grads)
        return model.kernel[...], model.bias[...]

    return jax.jit(
        jax.shard_map(
            train_step,
            mesh=mesh,
            in_specs=(P(), P("data"), P("data"), P()),
            out_specs=(P(), P()),
            check_vma=False,
        )
    )(model, x, y, float(lr))
