"""Shortcut: jax.pmap over the blocks instead of jax.shard_map (the problem practises shard_map), reassembled into a P("data") array."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh  # a mesh that divides any length

VERDICT = "technique"
PHRASE = "jax.shard_map"
DEVICES = (8,)  # open: on one device a pmap answer is not refused (it is on 8)


def shard_map_double(x: jax.Array) -> jax.Array:
    """Double every element of a 1-D array, each device doubling its own block."""
    if not isinstance(x, (np.ndarray, jax.Array)):
        raise TypeError(f"x must be an array of numbers, not {type(x).__name__}")
    if x.dtype == jnp.bool_ or not jnp.issubdtype(x.dtype, jnp.number):
        raise TypeError(f"x must hold numbers, not {x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, but has shape {x.shape}")
    n = x.shape[0]
    mesh = data_mesh(n)
    if isinstance(x, jax.core.Tracer):
        # pmap is not for traced callers: the shard_map equivalent on an Auto mesh.
        auto = jax.sharding.Mesh(mesh.devices, mesh.axis_names)
        return jax.shard_map(lambda b: b * 2.0, mesh=auto, in_specs=P("data"), out_specs=P("data"))(x)
    devices = list(mesh.devices.flat)
    d = len(devices)
    blocks = jnp.asarray(x).reshape(d, n // d)
    doubled = jax.pmap(lambda b: b * 2.0, devices=devices)(blocks)
    by_device = {shard.device: shard.data.reshape(n // d) for shard in doubled.addressable_shards}
    return jax.make_array_from_single_device_arrays(
        (n,), NamedSharding(mesh, P("data")), [by_device[device] for device in devices]
    )
