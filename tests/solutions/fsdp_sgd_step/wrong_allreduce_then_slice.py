"""Mistake: w gathered, but differentiated whole (an all-reduce of the whole gradient),
then each device slices its own rows out: the values are right, the technique is not."""

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "no reduce-scatter"
DEVICES = (8,)  # on one device the statement asks for shard_map alone


def fsdp_sgd_step(w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P("data", None)))
    b = jax.device_put(b, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data", None)))

    def local_step(w_rows, b, x, y):
        # typed invariant: the same whole w on every device, like a replicated parameter
        w_whole = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True, to="invarying")

        def loss(w, b):
            return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

        dw, db = jax.grad(loss, argnums=(0, 1))(w_whole, b)  # wrong: all-reduced whole
        n = w_rows.shape[0]
        start = jax.lax.axis_index("data") * n
        dw_rows = jax.lax.dynamic_slice_in_dim(dw, start, n, axis=0)
        return w_rows - lr * dw_rows, b - lr * db

    return jax.jit(
        jax.shard_map(
            local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data", None), P("data", None)),
            out_specs=(P("data", None), P()),
        )
    )(w, b, x, y)
