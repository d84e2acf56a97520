"""Mistake: the whole batch gathered onto every device by a psum of zero-padded blocks, then each
device takes the whole batch's gradient itself: right values, the batch not split."""

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

VERDICT = "technique"
PHRASE = "x or y (the batch) travels"
DEVICES = (8,)  # on one device there is nothing to gather


def nnx_data_parallel_step(
    seed: int, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Real):
        raise TypeError("seed must be a number")
    if not float(seed).is_integer():
        raise ValueError("seed must be whole")
    for a in (x, y):
        if not isinstance(a, (jax.Array, np.ndarray)):
            raise TypeError("x and y must be arrays")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise TypeError("x and y must be floating-point")
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError("lr must be a real number")
    if math.isnan(lr) or math.isinf(lr):
        raise ValueError("lr must be finite")
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise ValueError("shapes do not fit together")
    if x.size == 0 or y.size == 0:
        raise ValueError("empty batch, input or output")

    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))
    mesh = data_mesh(x.shape[0])
    model = jax.device_put(model, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    lr = float(lr)

    n = mesh.shape["data"]

    def gather_by_psum(a):
        i = jax.lax.axis_index("data")
        rows = a.shape[0]
        padded = jnp.zeros((n * rows, *a.shape[1:]), a.dtype)
        padded = jax.lax.dynamic_update_slice_in_dim(padded, a, i * rows, 0)
        return jax.lax.psum(padded, "data")  # the whole batch on every device

    def train_step(model, x, y):
        X, Y = gather_by_psum(x), gather_by_psum(y)
        optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
        grads = nnx.grad(lambda m: jnp.mean((m(X) - Y) ** 2))(model)  # whole batch, no averaging
        optimizer.update(model, grads)
        return model.kernel[...], model.bias[...]

    return jax.jit(
        jax.shard_map(
            train_step,
            mesh=mesh,
            in_specs=(P(), P("data"), P("data")),
            out_specs=(P(), P()),
        )
    )(model, x, y)
