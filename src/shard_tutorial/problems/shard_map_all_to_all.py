"""Problem "shard_map with all_to_all": a transpose of a row-split matrix.

With the rows of ``x`` split over the devices, the rows of ``x.T`` are the
columns of ``x``, and every device holds a piece of each of them.
:func:`jax.lax.all_to_all` re-cuts an array across the devices: each device cuts
its block into one chunk per device along one axis (``split_axis``), sends chunk
``j`` to device ``j``, and joins the chunks it receives along another axis
(``concat_axis``). Cutting the columns and joining the rows gives each device
whole columns of ``x``, which it transposes locally into its rows of ``x.T``. The
same exchange moves a model between data and expert or sequence parallelism.
Input and output are both split by rows, ``out_specs=P("data")``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import data_mesh_for, device_counts, place, usable_device_count
from shard_tutorial.problem import Case, Forbidden, Placement, Problem, Technique, precise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_all_to_all"]


def shard_map_all_to_all(x: jax.Array) -> jax.Array:
    """Transpose a matrix whose rows are split: ``all_to_all`` swaps which axis is split.

    The rows of ``x`` are split over the devices, and so are the rows of the
    result. The device count divides both n and m (see
    :func:`~shard_tutorial.data_mesh`), so every shape works.

    This problem practises ``jax.shard_map`` with ``jax.lax.all_to_all``: each
    device sends every other device the piece of its rows that device will hold,
    in one all-to-all, and ``x`` is never gathered whole. The mesh is
    ``data_mesh(math.gcd(n, m))``: the most devices, up to all of them, that
    divide both of ``x``'s lengths.

    ``n``, ``m`` or both may be 0: ``x.T`` is then empty. With jax 0.12 an
    ``all_to_all`` of empty blocks gives it; with jax 0.10 an ``x`` of shape
    (0, m) gives an array whose shards do not fit its shape (reading it fails).
    Return the empty answer without the collective, on the mesh (``P("data")``).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 2-D array of numbers, of shape (n, m).

    Returns:
      ``x.T``, of shape (m, n) and the dtype of ``x``, its rows split over the
      devices (``P("data")``).

    Raises:
      TypeError: if ``x`` is not a numeric array.
      ValueError: if ``x`` is not 2-D.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_all_to_all
      >>> shard_map_all_to_all(jnp.array([[1, 2, 3], [4, 5, 6]]))
      Array([[1, 4],
             [2, 5],
             [3, 6]], dtype=int32)

      On 8 devices, each holds 2 whole rows of the transpose:

      >>> y = shard_map_all_to_all(jnp.arange(16 * 8).reshape(8, 16))
      >>> tuple(y.sharding.spec), y.addressable_shards[0].data.shape
      (('data', None), (2, 8))
    """
    check_array(x, "x", ndim=2, layout="of shape (n, m)")
    # The devices split the rows of x and of x.T (its columns): their count divides both.
    mesh = data_mesh_for(x, length=math.gcd(*x.shape))  # Auto axes when traced
    rows = NamedSharding(mesh, P("data"))
    if x.size == 0:  # jax 0.10 cannot exchange empty blocks (0.12 can); x.T is empty anyway
        return place(jnp.zeros(x.shape[::-1], x.dtype), rows)
    x = place(x, rows)  # jax.device_put, fast on CPU devices
    return _transpose(mesh)(x)


def _exchange_then_transpose(rows: jax.Array) -> jax.Array:
    # Cut this device's rows into one chunk of columns per device, send chunk j to
    # device j, and join the chunks received (one per device) along the rows:
    columns = jax.lax.all_to_all(rows, "data", split_axis=1, concat_axis=0, tiled=True)
    return columns.T  # this device's columns of x, as rows of x.T


@functools.cache
def _transpose(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that transposes ``x``."""
    return jax.jit(
        jax.shard_map(
            _exchange_then_transpose,
            mesh=mesh,
            in_specs=P("data"),  # each device gets a block of rows of x
            out_specs=P("data"),  # and returns a block of rows of x.T
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return x.T


def _oracle(x: np.ndarray) -> np.ndarray:
    return precise(x).T


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    n, m = x.shape
    if received.ndim != 2:
        return None
    for devices in device_counts(n):
        if received.shape != (devices * m, n // devices):
            continue
        local = np.concatenate([block.T for block in np.split(x, devices)])
        if np.allclose(received, local, rtol=1e-4, atol=1e-4):
            return (
                f"Each of {devices} devices transposed its own block of rows: {devices} "
                f"blocks of shape ({m}, {n // devices}) stacked, not the transpose. Each "
                "device needs whole columns of x first: exchange the chunks with "
                'jax.lax.all_to_all(rows, "data", split_axis=1, concat_axis=0, tiled=True)'
            )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: up to 40 by 40, small integers or float32 values."""
    n, m = (int(v) for v in rng.integers(0, 41, size=2))
    if rng.random() < 0.5:
        x = rng.integers(-100, 100, (n, m)).astype(np.int32)
        return Case(f"random int32, shape ({n}, {m})", (x,))
    return Case(f"random, shape ({n}, {m})", (rng.normal(size=(n, m)).astype(np.float32),))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260205)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    return [
        Case(
            "example from the problem statement",
            (np.array([[1, 2, 3], [4, 5, 6]], np.int32),),
        ),
        Case("a single element", (np.array([[-2.5]], np.float32),)),
        Case("empty: shape (0, 3)", (np.zeros((0, 3), np.float32),)),
        Case("one row becomes one column", (normal(1, 8),)),
        Case("5 by 10: 8 devices divide neither", (normal(5, 10),)),
        Case("12 by 18: split over 6 of 8 devices", (normal(12, 18),)),
        Case("16 by 8: 8 devices", (np.arange(128, dtype=np.float32).reshape(16, 8),)),
        Case("int32 input stays int32", (np.arange(256, dtype=np.int32).reshape(8, 32),)),
        Case("64 by 40, random", (normal(64, 40),)),
        Case("bfloat16 stays bfloat16", (normal(16, 8).astype(jnp.bfloat16),)),
        Case("float16 stays float16", (normal(12, 6).astype(np.float16),)),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: the most devices that divide both of x's lengths."""
    return (usable_device_count(math.gcd(*np.shape(args[0])), devices),)


TECHNIQUE = Technique(
    collectives=(("all-to-all",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "x must never be gathered whole: all_to_all re-cuts it, each device sending "
            "each other device only the piece it will hold",
        ),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    return [
        Case("x a list of rows, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 1-D x", (x[0],), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_all_to_all",
    title="shard_map with all_to_all",
    reference=shard_map_all_to_all,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    explain=_explain,
    folder="collectives",
    generate=_generate,
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=Placement(axis=0),
    make_refusals=_refusals,
)
