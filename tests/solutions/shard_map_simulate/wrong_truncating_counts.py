"""Mistake: counts converted with int() unchecked: 2.5 shards silently become 2, a traced count is not refused as the statement asks."""

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VERDICT = "fail"
PHRASE = "ValueError"
DEVICES = (1, 8)


def shard_map_simulate(seed, x, num_shards, features):
    seed, num_shards, features = int(seed), int(num_shards), int(features)  # wrong: truncates 2.5
    if x.ndim != 2:
        raise ValueError("x must be 2-D")
    model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))
    chunk = x.shape[0] // num_shards
    outs = [model(jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)) for i in range(num_shards)]
    return jnp.concatenate(outs, axis=0).reshape(-1)
