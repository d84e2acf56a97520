"""Reference implementations for learning sharded computation in JAX.

The package holds the reference solution of every problem on the
shard_tutorial site, the helpers its pages use (fake CPU devices, the data
mesh) and the problem records (:mod:`shard_tutorial.problems`) that tie each
solution to its oracle and its cases.

Each name below is imported from its module on first use, so
``from shard_tutorial import use_cpu_devices`` loads only what that needs.
(That keeps imports light, and lets the documentation build tell which pages
can depend on which module.)

Examples:
  >>> import shard_tutorial
  >>> list(shard_tutorial.PROBLEMS)
  ['shard_map_double', 'shard_map_vs_vmap', 'shard_map_psum', 'shard_map_simulate',
   'shard_map_pmean', 'shard_map_all_gather', 'shard_map_ppermute',
   'shard_map_psum_scatter', 'shard_map_all_to_all', 'shard_map_axis_index',
   'data_parallel_sgd_step', 'fsdp_sgd_step', 'tensor_parallel_mlp',
   'nnx_data_parallel_step', 'collective_matmul_all_gather',
   'collective_matmul_reduce_scatter', 'expert_parallel_moe', 'pipeline_forward',
   'ring_attention', 'zero_adam_step', 'pipeline_train_step', 'ulysses_attention',
   'moe_top2']
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from shard_tutorial.problem_names import PROBLEM_NAMES

__version__ = "0.1.0"

# Public name -> the module that defines it: the helpers, then each problem's reference,
# in the module named after it.
_LAZY = {
    "DATA_AXIS": "shard_tutorial.meshes",
    "PROBLEMS": "shard_tutorial.problems",
    "axis_mesh": "shard_tutorial.meshes",
    "check": "shard_tutorial.checking.checker",
    "data_mesh": "shard_tutorial.meshes",
    "data_mesh_for": "shard_tutorial.meshes",
    "data_model_mesh": "shard_tutorial.meshes",
    "data_model_shape": "shard_tutorial.meshes",
    "MODEL_AXIS": "shard_tutorial.meshes",
    "data_parallel_forward": "shard_tutorial.problems.shard_map_simulate",
    "get_problem": "shard_tutorial.problems",
    "join_cluster": "shard_tutorial.launcher",
    "launch": "shard_tutorial.launcher",
    "place": "shard_tutorial.meshes",
    "reference_copy": "shard_tutorial.checking.checker",
    "usable_device_count": "shard_tutorial.meshes",
    "use_cpu_devices": "shard_tutorial.devices",
    **{name: f"shard_tutorial.problems.{name}" for name in PROBLEM_NAMES},
}

# Written out, as linters and type checkers read it; tests/test_problem.py checks it
# against _LAZY, and so against PROBLEM_NAMES.
__all__ = [
    "DATA_AXIS",
    "MODEL_AXIS",
    "PROBLEMS",
    "axis_mesh",
    "check",
    "collective_matmul_all_gather",
    "collective_matmul_reduce_scatter",
    "data_mesh",
    "data_mesh_for",
    "data_model_mesh",
    "data_model_shape",
    "data_parallel_forward",
    "data_parallel_sgd_step",
    "expert_parallel_moe",
    "fsdp_sgd_step",
    "get_problem",
    "join_cluster",
    "launch",
    "moe_top2",
    "nnx_data_parallel_step",
    "pipeline_forward",
    "pipeline_train_step",
    "place",
    "reference_copy",
    "ring_attention",
    "shard_map_all_gather",
    "shard_map_all_to_all",
    "shard_map_axis_index",
    "shard_map_double",
    "shard_map_pmean",
    "shard_map_ppermute",
    "shard_map_psum",
    "shard_map_psum_scatter",
    "shard_map_simulate",
    "shard_map_vs_vmap",
    "tensor_parallel_mlp",
    "ulysses_attention",
    "usable_device_count",
    "use_cpu_devices",
    "zero_adam_step",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        msg = f"module 'shard_tutorial' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # what type checkers and IDEs see
    from shard_tutorial.checking.checker import check, reference_copy
    from shard_tutorial.devices import use_cpu_devices
    from shard_tutorial.launcher import join_cluster, launch
    from shard_tutorial.meshes import (
        DATA_AXIS,
        MODEL_AXIS,
        axis_mesh,
        data_mesh,
        data_mesh_for,
        data_model_mesh,
        data_model_shape,
        place,
        usable_device_count,
    )
    from shard_tutorial.problems import PROBLEMS, get_problem
    from shard_tutorial.problems.collective_matmul_all_gather import collective_matmul_all_gather
    from shard_tutorial.problems.collective_matmul_reduce_scatter import (
        collective_matmul_reduce_scatter,
    )
    from shard_tutorial.problems.data_parallel_sgd_step import data_parallel_sgd_step
    from shard_tutorial.problems.expert_parallel_moe import expert_parallel_moe
    from shard_tutorial.problems.fsdp_sgd_step import fsdp_sgd_step
    from shard_tutorial.problems.moe_top2 import moe_top2
    from shard_tutorial.problems.nnx_data_parallel_step import nnx_data_parallel_step
    from shard_tutorial.problems.pipeline_forward import pipeline_forward
    from shard_tutorial.problems.pipeline_train_step import pipeline_train_step
    from shard_tutorial.problems.ring_attention import ring_attention
    from shard_tutorial.problems.shard_map_all_gather import shard_map_all_gather
    from shard_tutorial.problems.shard_map_all_to_all import shard_map_all_to_all
    from shard_tutorial.problems.shard_map_axis_index import shard_map_axis_index
    from shard_tutorial.problems.shard_map_double import shard_map_double
    from shard_tutorial.problems.shard_map_pmean import shard_map_pmean
    from shard_tutorial.problems.shard_map_ppermute import shard_map_ppermute
    from shard_tutorial.problems.shard_map_psum import shard_map_psum
    from shard_tutorial.problems.shard_map_psum_scatter import shard_map_psum_scatter
    from shard_tutorial.problems.shard_map_simulate import (
        data_parallel_forward,
        shard_map_simulate,
    )
    from shard_tutorial.problems.shard_map_vs_vmap import shard_map_vs_vmap
    from shard_tutorial.problems.tensor_parallel_mlp import tensor_parallel_mlp
    from shard_tutorial.problems.ulysses_attention import ulysses_attention
    from shard_tutorial.problems.zero_adam_step import zero_adam_step
