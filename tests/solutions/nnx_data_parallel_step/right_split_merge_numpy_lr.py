"""Flax's functional API: nnx.split into graphdef and state, a jitted shard_map over the
state, nnx.merge inside; lr a NumPy float32 scalar closed over."""

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
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Real):
        raise TypeError("seed must be a number")
    if not math.isfinite(seed) or int(seed) != seed:
        raise ValueError("seed must be a whole number")
    if not isinstance(x, (jax.Array, np.ndarray)) or not isinstance(y, (jax.Array, np.ndarray)):
        raise TypeError("x and y must be arrays")
    if not (jnp.issubdtype(x.dtype, jnp.floating) and jnp.issubdtype(y.dtype, jnp.floating)):
        raise TypeError("x and y must be floating-point")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if not math.isfinite(lr):
        raise ValueError("lr must be finite")
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError("x and y must be 2-D")
    batch, d_in = x.shape
    if y.shape[0] != batch:
        raise ValueError("x and y have different batch sizes")
    if batch == 0 or d_in == 0 or y.shape[1] == 0:
        raise ValueError("empty batch, input or output")

    model = nnx.Linear(d_in, y.shape[1], rngs=nnx.Rngs(int(seed)))
    graphdef, state = nnx.split(model)
    mesh = data_mesh(batch)
    state = jax.device_put(state, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    rate = np.float32(lr)

    def train_step(state, x, y):
        model = nnx.merge(graphdef, state)
        optimizer = nnx.Optimizer(model, optax.sgd(rate), wrt=nnx.Param)

        def loss_fn(model):
            return jax.lax.pmean(jnp.mean((model(x) - y) ** 2), "data")

        optimizer.update(model, nnx.grad(loss_fn)(model))
        return nnx.state(model)

    new_state = jax.jit(
        jax.shard_map(train_step, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
    )(state, x, y)
    trained = nnx.merge(graphdef, new_state)
    return trained.kernel[...], trained.bias[...]
