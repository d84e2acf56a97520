"""Reference implementations for learning sharded computation in JAX.

The package holds the reference solution of every problem on the
shard_tutorial site, the helpers its pages use (fake CPU devices, the data
mesh) and the problem records (:mod:`shard_tutorial.problems`) that tie each
solution to its oracle and its cases.

Examples:
  >>> import shard_tutorial
  >>> sorted(shard_tutorial.PROBLEMS)
  ['shard_map_double', 'shard_map_psum', 'shard_map_simulate', 'shard_map_vs_vmap']
"""

from __future__ import annotations

from shard_tutorial.devices import use_cpu_devices
from shard_tutorial.meshes import DATA_AXIS, data_mesh, place, usable_device_count
from shard_tutorial.problems import PROBLEMS, get_problem
from shard_tutorial.problems.shard_map_double import shard_map_double
from shard_tutorial.problems.shard_map_psum import shard_map_psum
from shard_tutorial.problems.shard_map_simulate import data_parallel_forward, shard_map_simulate
from shard_tutorial.problems.shard_map_vs_vmap import shard_map_vs_vmap

__version__ = "0.1.0"

__all__ = [
    "DATA_AXIS",
    "PROBLEMS",
    "data_mesh",
    "data_parallel_forward",
    "get_problem",
    "place",
    "shard_map_double",
    "shard_map_psum",
    "shard_map_simulate",
    "shard_map_vs_vmap",
    "usable_device_count",
    "use_cpu_devices",
]
