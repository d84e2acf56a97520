"""check_vma=False style: pmean of a 1-element block mean (keepdims), broadcast back over the block; jitted."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

_programs = {}


def shard_map_pmean(x: jax.Array) -> jax.Array:
    """Centre a 1-D array on its mean: pmean turns each block's mean into the global mean."""
    if not isinstance(x, (np.ndarray, jax.Array)) or not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError("x must be an array of floating-point numbers")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    if x.shape[0] < 1:
        raise ValueError("x must have at least one element")
    mesh = data_mesh(x.shape[0])
    if mesh not in _programs:
        _programs[mesh] = jax.jit(
            jax.shard_map(
                lambda b: b - jax.lax.pmean(jnp.mean(b, keepdims=True), "data"),
                mesh=mesh,
                in_specs=P("data"),
                out_specs=P("data"),
                check_vma=False,
            )
        )
    return _programs[mesh](jax.device_put(x, NamedSharding(mesh, P("data"))))
