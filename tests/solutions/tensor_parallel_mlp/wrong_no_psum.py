"""Mistake: no psum (check_vma=False, as JAX's error suggests): each device returns its
own hidden units' share, and the output is one device's share, not the sum."""

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_model_mesh  # a (data, model) mesh for any shapes

VERDICT = "fail"
PHRASE = "hold different values"
DEVICES = (8,)


def tensor_parallel_mlp(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    mesh = data_model_mesh(x.shape[0], w1.shape[1])
    specs = (P("data", None), P(None, "model"), P("model", None))
    x, w1, w2 = (jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs))
    return jax.jit(
        jax.shard_map(
            lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2,  # wrong: no psum
            mesh=mesh,
            in_specs=specs,
            out_specs=P("data", None),
            check_vma=False,
        )
    )(x, w1, w2)
