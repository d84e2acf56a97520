"""Problem "shard_map with all_gather": an outer product from a split vector.

Inside :func:`jax.shard_map` each device holds one block of ``x``, so it can
compute only its block's rows of the outer product ``x[:, None] * x[None, :]``,
and each of those rows needs *all* of ``x``. :func:`jax.lax.all_gather` hands
every device the blocks of all devices along a mesh axis; with ``tiled=True``
they are joined end to end into the whole vector (with ``tiled=False`` they are
stacked along a new leading axis). Each device then multiplies its block, as a
column, by the whole vector, as a row: its rows of the result, which stays split
by rows, ``out_specs=P("data")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import data_mesh_for, device_counts, place
from shard_tutorial.problem import Case, Placement, Problem, Technique, precise
from shard_tutorial.problems._blocks import blockwise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_all_gather"]


def shard_map_all_gather(x: jax.Array) -> jax.Array:
    """The outer product of a vector with itself: ``all_gather`` gives each device the whole vector.

    This problem practises ``jax.shard_map`` with ``jax.lax.all_gather``: each
    device gathers the blocks of every device to multiply its own rows by the
    whole vector. The mesh is ``data_mesh(n)``.

    ``n`` may be 0: the answer is then the empty (0, 0) array. XLA cannot
    all-gather blocks with no elements (with jax 0.10 and 0.12 alike, lowering
    fails: "dimension size of operand at 'all_gather_dim' cannot be zero"), so
    return the empty answer without the collective, on the mesh like any other.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 1-D array of numbers, length n >= 0.

    Returns:
      ``x[:, None] * x[None, :]``, of shape (n, n) and the dtype of ``x``, its
      rows split over the devices (``P("data")``).

    Raises:
      TypeError: if ``x`` is not a numeric array.
      ValueError: if ``x`` is not 1-D.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_all_gather
      >>> shard_map_all_gather(jnp.array([1.0, 2.0, 3.0]))
      Array([[1., 2., 3.],
             [2., 4., 6.],
             [3., 6., 9.]], dtype=float32)

      On 8 devices, each holds 2 of the 16 rows, every one of them whole:

      >>> y = shard_map_all_gather(jnp.arange(16))
      >>> tuple(y.sharding.spec), y.addressable_shards[0].data.shape
      (('data', None), (2, 16))
    """
    check_array(x, "x", ndim=1, layout="of shape (n,)")
    mesh = data_mesh_for(x)  # Auto axes when traced (jit, grad, vmap): see its docstring
    rows = NamedSharding(mesh, P("data"))
    if x.shape[0] == 0:  # XLA cannot gather empty blocks; the product is empty anyway
        return place(jnp.zeros((0, 0), x.dtype), rows)
    x = place(x, rows)  # jax.device_put, fast on CPU devices
    return _outer_product(mesh)(x)


def _block_rows(block: jax.Array) -> jax.Array:
    whole = jax.lax.all_gather(block, axis_name="data", tiled=True)  # x, on every device
    return block[:, None] * whole[None, :]  # this block's rows: one per element of the block


@functools.cache
def _outer_product(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that computes the outer product."""
    return jax.jit(
        jax.shard_map(
            _block_rows,
            mesh=mesh,
            in_specs=P("data"),  # each device gets one block of x
            out_specs=P("data"),  # its rows of the product, joined along axis 0
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return x[:, None] * x[None, :]


def _oracle(x: np.ndarray) -> np.ndarray:
    wide = precise(x)
    return np.multiply.outer(wide, wide)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    n = x.shape[0]
    if received.ndim == 3 and received.shape[-1] * received.shape[-2] in (n, n * n):
        return (
            f"The result has an extra axis (shape {received.shape}): all_gather with "
            "tiled=False stacks the blocks along a new leading axis. Pass tiled=True to "
            "join them end to end into the whole vector"
        )
    if received.ndim != 2 or received.shape[0] != n:
        return None
    for devices in device_counts(n):
        size = n // devices
        if received.shape[1] != size:
            continue
        own_block = blockwise(x, devices, lambda block: np.multiply.outer(block, block))
        if np.allclose(received, own_block, rtol=1e-4, atol=1e-4):
            return (
                f"Each row has only {size} of its {n} columns: each device multiplied its "
                "block by itself only. Every row needs the whole vector: gather it with "
                'jax.lax.all_gather(block, "data", tiled=True)'
            )
        if size != devices:  # the stacked blocks broadcast against a block only then
            continue
        stacked = np.concatenate(
            [block[:, None] * x.reshape(devices, size) for block in np.split(x, devices)]
        )
        if np.allclose(received, stacked, rtol=1e-4, atol=1e-4):
            return (
                f"Each row has {size} of its {n} columns, from the wrong elements: the "
                "blocks were gathered along the wrong axis (stacked as rows, one per "
                "device, instead of joined into one row). Gather the 1-D block with "
                "tiled=True, or a (1, size) row along axis=1"
            )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a length from 0 to 40, small integers or float32 values."""
    n = int(rng.integers(0, 41))
    if rng.random() < 0.5:
        return Case(f"random int32, length {n}", (rng.integers(-100, 100, n).astype(np.int32),))
    return Case(f"random, length {n}", (rng.normal(size=n).astype(np.float32),))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260202)
    return [
        Case("example from the problem statement", (np.array([1.0, 2.0, 3.0], np.float32),)),
        Case("a single element", (np.array([-2.5], np.float32),)),
        Case("empty: a (0, 0) product", (np.zeros(0, np.float32),)),
        Case("length 5: 8 devices do not divide it", (np.arange(1, 6, dtype=np.float32),)),
        Case("length 12: split over 6 of 8 devices", (rng.normal(size=12).astype(np.float32),)),
        Case("length 13: a prime, one device", (rng.normal(size=13).astype(np.float32),)),
        Case("length 16: 2 rows per device on 8", (rng.normal(size=16).astype(np.float32),)),
        Case("length 64: 8 rows per device on 8", (rng.normal(size=64).astype(np.float32),)),
        Case("int32 input stays int32", (np.arange(-20, 20, dtype=np.int32),)),
        Case("length 200, random", (rng.normal(size=200).astype(np.float32),)),
        Case("bfloat16 stays bfloat16", (rng.normal(size=24).astype(jnp.bfloat16),)),
        Case("float16 stays float16, length 20", (rng.normal(size=20).astype(np.float16),)),
    ]


TECHNIQUE = Technique(collectives=(("all-gather",),))
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    return [
        Case("x a list, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 2-D x", (x.reshape(1, 3),), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_all_gather",
    title="shard_map with all_gather",
    reference=shard_map_all_gather,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    explain=_explain,
    folder="collectives",
    generate=_generate,
    technique=TECHNIQUE,
    placement=Placement(axis=0),
    make_refusals=_refusals,
)
