"""Problem "shard_map with psum_scatter": column sums of a batch, left split over the devices.

With the rows of a batch split over the devices, each device can sum only its own
rows: a vector of partial column sums. ``psum`` would add those vectors and give
*every* device the whole total. :func:`jax.lax.psum_scatter` adds them too, but
hands each device only its own block of the total (a *reduce-scatter*): the same
sums for a fraction of the memory and of the communication, the step that
sharded data-parallel training (ZeRO, FSDP) takes on its gradients. The output
is split over the devices, ``out_specs=P("data")``.
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
from shard_tutorial.problem import Budget, Case, Forbidden, Placement, Problem, Technique, precise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "shard_map_psum_scatter"]


def shard_map_psum_scatter(x: jax.Array) -> jax.Array:
    """Column sums of a batch: ``psum_scatter`` adds the devices' partial sums, split over them.

    The rows of ``x`` (the batch) are split over the devices; so is the result.
    The device count divides both the batch and the number of columns (see
    :func:`~shard_tutorial.data_mesh`), so every shape works.

    This problem practises ``jax.shard_map`` with ``jax.lax.psum_scatter``:
    each device sums its own rows, and one reduce-scatter adds the partial sums
    and leaves each device only its block of the total. The mesh is
    ``data_mesh(math.gcd(B, n))``: the most devices, up to all of them, that
    divide both the batch and the number of columns. With ``d`` devices, each
    may send at most what that one reduce-scatter sends in a ring: ``d - 1``
    blocks of ``n / d`` sums (the checker's budget, read from the compiled
    program).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split.

    Args:
      x: 2-D array of numbers, of shape (B, n) with B >= 1 and n >= 1.

    Returns:
      ``x.sum(axis=0)``, of shape (n,), split over the devices (``P("data")``).

    Raises:
      TypeError: if ``x`` is not a numeric array.
      ValueError: if ``x`` is not 2-D, or has no rows or no columns.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import shard_map_psum_scatter
      >>> shard_map_psum_scatter(jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
      Array([ 9., 12.], dtype=float32)

      On 8 devices, each holds 2 of the 16 sums:

      >>> y = shard_map_psum_scatter(jnp.ones((32, 16)))
      >>> tuple(y.sharding.spec), y.addressable_shards[0].data
      (('data',), Array([32., 32.], dtype=float32))
    """
    check_array(x, "x", ndim=2, layout="of shape (B, n)")
    if x.shape[0] == 0 or x.shape[1] == 0:
        msg = f"x must have at least one row and one column, got shape {x.shape}"
        raise ValueError(msg)
    # The devices split the rows of x and the sums (the columns): their count divides both.
    mesh = data_mesh_for(x, length=math.gcd(*x.shape))  # Auto axes when traced
    x = place(x, NamedSharding(mesh, P("data")))  # jax.device_put, fast on CPU devices
    return _column_sums(mesh)(x)


def _partial_sums_then_scatter(rows: jax.Array) -> jax.Array:
    partial_sums = jnp.sum(rows, axis=0)  # this device's rows only: shape (n,)
    # Add every device's partial sums, and keep this device's block of the total.
    return jax.lax.psum_scatter(partial_sums, axis_name="data", scatter_dimension=0, tiled=True)


@functools.cache
def _column_sums(mesh: Mesh) -> Callable[[jax.Array], jax.Array]:
    """Build, once per mesh, the compiled function that sums the columns of ``x``."""
    return jax.jit(
        jax.shard_map(
            _partial_sums_then_scatter,
            mesh=mesh,
            in_specs=P("data"),  # each device gets a block of rows
            out_specs=P("data"),  # each device returns its block of the sums
        )
    )


def _unsharded(x: jax.Array) -> jax.Array:
    return x.sum(axis=0)


def _oracle(x: np.ndarray) -> np.ndarray:
    return precise(x).sum(axis=0)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    x = precise(case.args[0])
    batch, n = x.shape
    if received.shape != (n,):
        if received.ndim == 1 and received.shape[0] > 0 and received.shape[0] % n == 0:
            devices = received.shape[0] // n
            return (
                f"The result holds {devices} vectors of {n} sums, one per device: each "
                "device's partial sums, joined. Add them up across the devices, with "
                'jax.lax.psum_scatter(..., "data", tiled=True)'
            )
        return None
    for devices in device_counts(batch):  # a solution may split the rows only
        rows = batch // devices
        if np.allclose(received, x[:rows].sum(axis=0), rtol=1e-4, atol=1e-4):
            return (
                f"These are the sums of the first {rows} of the {batch} rows only: one "
                "device's partial sums. Add every device's partial sums with "
                'jax.lax.psum_scatter(..., "data", tiled=True)'
            )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: up to 40 rows and 40 columns, small integers or float32 values."""
    batch, n = (int(v) for v in rng.integers(1, 41, size=2))
    if rng.random() < 0.5:
        x = rng.integers(-100, 100, (batch, n)).astype(np.int32)
        return Case(f"random int32, shape ({batch}, {n})", (x,))
    return Case(f"random, shape ({batch}, {n})", (rng.normal(size=(batch, n)).astype(np.float32),))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20260204)

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    return [
        Case(
            "example from the problem statement",
            (np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32),),
        ),
        Case("one row, one column", (np.array([[-2.5]], np.float32),)),
        Case("one row: the sums are that row", (normal(1, 8),)),
        Case("5 rows: 8 devices do not divide them", (normal(5, 10),)),
        Case("12 rows, 18 columns: split over 6 of 8 devices", (normal(12, 18),)),
        Case("16 rows, 6 columns: 2 devices divide both", (normal(16, 6),)),
        Case("32 rows, 16 columns: 8 devices", (np.arange(512, dtype=np.float32).reshape(32, 16),)),
        Case("int32 input stays int32", (np.arange(-64, 64, dtype=np.int32).reshape(16, 8),)),
        Case("256 rows, 64 columns, random", (normal(256, 64),)),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: the most devices that divide both the batch and the columns."""
    return (usable_device_count(math.gcd(*np.shape(args[0])), devices),)


TECHNIQUE = Technique(
    collectives=(("reduce-scatter",),),
    forbidden=(
        Forbidden(
            "all-reduce",
            "an all-reduce gives every device every sum, and slicing then throws most of "
            "them away; psum_scatter hands each device its block of the sums only",
        ),
        Forbidden("all-gather", "x, or the sums, gathered whole is what psum_scatter avoids"),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """At most one reduce-scatter's bytes: each of d devices sends d - 1 blocks of n / d sums.

    Examples:
      >>> import jax, numpy as np
      >>> _limits((np.ones((32, 16), np.float32),))["sent"] == (jax.device_count() - 1) * 2 * 4
      True
    """
    x = args[0]
    n = usable_device_count(math.gcd(*np.shape(x)), jax.device_count())
    columns = np.shape(x)[1]
    return {"sent": (n - 1) * (columns // n) * np.dtype(x.dtype).itemsize}


BUDGET = Budget(
    _limits,
    "a reduce-scatter of the column sums sends d - 1 blocks of n / d sums from each of "
    "the d devices; reducing anything bigger (every row, or every sum onto every device) "
    "sends more",
)
"""What a solution may send per device: one reduce-scatter of the column sums."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    return [
        Case("x a list of rows, not an array", (x.tolist(),), raises="TypeError"),
        Case("a bool x", (x > 0,), raises="TypeError"),
        Case("a 1-D x", (x[0],), raises="ValueError"),
        Case("x with no rows", (x[:0],), raises="ValueError"),
        Case("x with no columns", (x[:, :0],), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="shard_map_psum_scatter",
    title="shard_map with psum_scatter",
    reference=shard_map_psum_scatter,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    atol=1e-4,  # float32 sums of up to 256 values, added in another order than NumPy's
    explain=_explain,
    folder="collectives",
    generate=_generate,
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=Placement(axis=0),
    budget=BUDGET,
    make_refusals=_refusals,
)
