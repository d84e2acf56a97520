"""Problem "shard_map with axis_index": a cumulative sum across the devices.

A cumulative sum depends on everything before each element. Inside
:func:`jax.shard_map` each device can take the cumulative sum of its own block,
but must then add the total of every block before it. :func:`jax.lax.axis_index`
tells a device its position along a mesh axis (0, 1, ... on each device, a
different value on each): with the block totals gathered from all devices
(:func:`jax.lax.all_gather`), each device adds those of the devices before it.
That per-device position is how SPMD code does something different on each
device, here an offset; the output stays split like the input,
``out_specs=P("data")``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import MAX_DEVICES, data_mesh_for, device_counts, place
from shard_tutorial.problem import Case, Forbidden, Placement, Problem, Technique, precise
from shard_tutorial.problems._blocks import blockwise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_axis_index"]


def shard_map_axis_index(x: jax.Array) -> jax.Array:
    """Cumulative sum: each device offsets its block's by the blocks before it, found with ``axis_index``.

    This problem practises ``jax.shard_map`` with ``jax.lax.axis_index``: each
    device finds its position along the mesh axis, and a collective brings it
    the totals of the blocks before its own. The mesh is ``data_mesh(n)``.

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 1-D array of numbers, length n >= 0.

    Returns:
      ``jnp.cumsum(x)``, of the shape and dtype ``jnp.cumsum`` gives, split over
      the devices like ``x`` (``P("data")``).

    Raises:
      TypeError: if ``x`` is not a numeric array.
      ValueError: if ``x`` is not 1-D.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_axis_index
      >>> shard_map_axis_index(jnp.array([1, 2, 3, 4]))
      Array([ 1,  3,  6, 10], dtype=int32)

      On 8 devices, the last device's block ends with the total:

      >>> y = shard_map_axis_index(jnp.ones(16))
      >>> tuple(y.sharding.spec), y.addressable_shards[-1].data
      (('data',), Array([15., 16.], dtype=float32))
    """
    check_array(x, "x", ndim=1, layout="of shape (n,)")
    mesh = data_mesh_for(x)  # Auto axes when traced (jit, grad, vmap): see its docstring
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _cumulative_sum(mesh)(x)


def _offset_block_cumsum(block: jax.Array) -> jax.Array:
    local = jnp.cumsum(block)  # this block's cumulative sum, from 0
    total = jnp.sum(block, dtype=local.dtype)  # this block's total
    totals = jax.lax.all_gather(total, axis_name="data")  # every block's, on every device
    me = jax.lax.axis_index("data")  # this device's position along "data": 0, 1, ...
    before = jnp.arange(totals.shape[0]) < me  # the devices whose blocks come first
    return local + jnp.sum(jnp.where(before, totals, 0))


@functools.cache
def _cumulative_sum(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that takes the cumulative sum of ``x``."""
    return jax.jit(
        jax.shard_map(
            _offset_block_cumsum,
            mesh=mesh,
            in_specs=P("data"),  # each device gets one block of x
            out_specs=P("data"),  # each device returns its block of the cumulative sum
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return jnp.cumsum(x)


def _oracle(x: np.ndarray) -> np.ndarray:
    return np.cumsum(precise(x))


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    if received.shape != x.shape:
        return None
    for devices in device_counts(x.shape[0]):
        if np.allclose(received, blockwise(x, devices, np.cumsum), rtol=1e-4, atol=1e-4):
            return (
                f"Each of {devices} blocks has its own cumulative sum, starting from 0: "
                "every device but the first must add the totals of the blocks before it "
                '(its position is jax.lax.axis_index("data"); the totals, a collective '
                "such as jax.lax.all_gather)"
            )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a length from 0 to 100, small integers or float32 values."""
    n = int(rng.integers(0, 101))
    if rng.random() < 0.5:
        return Case(f"random int32, length {n}", (rng.integers(-100, 100, n).astype(np.int32),))
    return Case(f"random, length {n}", (rng.normal(size=n).astype(np.float32),))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260206)
    return [
        Case("example from the problem statement", (np.array([1, 2, 3, 4], np.int32),)),
        Case("a single element", (np.array([-2.5], np.float32),)),
        Case("empty", (np.zeros(0, np.float32),)),
        Case("length 5: 8 devices do not divide it", (np.arange(1, 6, dtype=np.float32),)),
        Case("length 12: split over 6 of 8 devices", (rng.normal(size=12).astype(np.float32),)),
        Case("length 13: a prime, one device", (rng.normal(size=13).astype(np.float32),)),
        Case("length 16 of ones: 1 to 16", (np.ones(16, np.float32),)),
        Case("int32 input stays int32", (np.arange(-40, 24, dtype=np.int32),)),
        Case("length 1024, random", (rng.normal(size=1024).astype(np.float32),)),
    ]


def _more_than_the_totals(args: tuple[object, ...]) -> int:
    """The fewest bytes per device a collective moves that are more than the blocks' totals.

    The statement's collective brings each device the totals of the blocks before its
    own: one number per block, at most :data:`MAX_DEVICES` of them. Allowed with room
    to spare (two 8-byte numbers per block: a total widened, or paired with a count);
    anything larger moves blocks of ``x``, not totals (gather-then-slice).
    """
    del args
    return 2 * 8 * MAX_DEVICES + 1


TECHNIQUE = Technique(
    primitives=("axis_index",),
    collectives=(("all-gather", "collective-permute", "all-reduce"),),
    forbidden=tuple(
        Forbidden(
            kind,
            "a device needs the totals of the blocks before its own (a number per block), "
            "not the blocks themselves",
            at_least=_more_than_the_totals,
        )
        for kind in ("all-gather", "collective-permute", "all-reduce", "all-to-all")
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    return [
        Case("x a list, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 2-D x", (x.reshape(2, 2),), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_axis_index",
    title="shard_map with axis_index",
    reference=shard_map_axis_index,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    atol=1e-3,  # float32 running sums of up to 1024 values, added in another order
    explain=_explain,
    folder="collectives",
    generate=_generate,
    technique=TECHNIQUE,
    placement=Placement(axis=0),
    make_refusals=_refusals,
)
