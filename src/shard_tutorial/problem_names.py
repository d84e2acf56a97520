"""Every problem's name, written once, in the site's reading order.

The registry (:data:`shard_tutorial.problems.PROBLEMS`), the package's exports
(``shard_tutorial.__all__``) and the tests read the names here. Each name is the
function a solution defines, and the module of :mod:`shard_tutorial.problems` that
holds the problem. This module imports nothing: the package's root reads it when it
is imported, before JAX.

Examples:
  >>> from shard_tutorial.problem_names import PROBLEM_NAMES
  >>> PROBLEM_NAMES[:4]
  ('shard_map_double', 'shard_map_vs_vmap', 'shard_map_psum', 'shard_map_simulate')
"""

PROBLEM_NAMES: tuple[str, ...] = (
    # Part I, the first problems:
    "shard_map_double",
    "shard_map_vs_vmap",
    "shard_map_psum",
    "shard_map_simulate",
    # Part II, communication between devices:
    "shard_map_pmean",
    "shard_map_all_gather",
    "shard_map_ppermute",
    "shard_map_psum_scatter",
    "shard_map_all_to_all",
    "shard_map_axis_index",
    # Part III, training across devices:
    "data_parallel_sgd_step",
    "fsdp_sgd_step",
    "tensor_parallel_mlp",
    "nnx_data_parallel_step",
    # Part V, the parallelisms of large models:
    "collective_matmul_all_gather",
    "collective_matmul_reduce_scatter",
    "expert_parallel_moe",
    "pipeline_forward",
    "ring_attention",
    # Part VI, training at scale:
    "zero_adam_step",
    "pipeline_train_step",
    "ulysses_attention",
    "moe_top2",
)
"""The problems' names, in the order the site teaches them."""
