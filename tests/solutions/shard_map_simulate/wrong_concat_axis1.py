"""Mistake: the blocks of output joined along the feature axis (axis 1) instead of the batch axis, then flattened: same length, wrong order."""

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

VERDICT = "fail"
PHRASE = "joined along axis 1"
DEVICES = (1, 8)


def shard_map_simulate(seed, x, num_shards, features):
    seed, num_shards, features = int(seed), int(num_shards), int(features)
    model = nnx.Linear(x.shape[-1], features, rngs=nnx.Rngs(seed))
    chunk = x.shape[0] // num_shards
    outs = [model(jax.lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=0)) for i in range(num_shards)]
    return jnp.concatenate(outs, axis=1).reshape(-1)  # wrong axis
