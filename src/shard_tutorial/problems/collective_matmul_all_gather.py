"""Problem "Collective matmul: all-gather": ``x @ w`` with the rows of ``x`` passed round a ring.

In a sequence-parallel transformer the activations ``x`` arrive split by rows
(tokens) over the ``"model"`` axis, and the first weight of a layer is split by
columns over the same axis. Gathering ``x`` whole and then multiplying leaves
every device idle while the all-gather runs. A *collective matmul* cuts the
gather into its ring steps instead: each device multiplies the block of rows it
holds by its own columns of ``w``, passes the block on to its neighbour with
:func:`jax.lax.ppermute` and multiplies the block it receives, ``n`` times in
all. On a TPU or GPU each transfer runs while the previous block's product is
computed; the bytes sent are those of the all-gather (``n - 1`` blocks).
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

from shard_tutorial.meshes import axis_mesh, device_counts, place, usable_device_count
from shard_tutorial.problem import Budget, Case, Forbidden, Placement, Problem, Technique, precise
from shard_tutorial.validation import check_array

__all__ = ["PROBLEM", "collective_matmul_all_gather"]


def collective_matmul_all_gather(x: jax.Array, w: jax.Array) -> jax.Array:
    """``x @ w`` with ``x``'s rows over ``"model"``: each block of rows passed round the ring.

    ``x`` (S, D) arrives with its rows split over the ``"model"`` axis, ``w``
    (D, F) with its columns split over it; the result (S, F) has its columns
    split over ``"model"``, like ``w``. The mesh is ``axis_mesh("model",
    math.gcd(S, F))``: the most devices, up to all of them, that divide both
    ``S`` and ``F``, so every shape works (a gcd of 1 is one device).

    This problem practises the all-gather collective matmul with ``jax.shard_map``
    and ``jax.lax.ppermute``: instead of gathering ``x``, each device multiplies
    the block of rows it holds by its columns of ``w`` and passes the block on
    round the ring, ``n - 1`` collective-permutes of one block of ``x`` on a mesh
    of ``n`` devices and no all-gather. That is the checker's budget too: each
    device may send ``n - 1`` blocks of ``S / n`` rows of ``x``, and, where ``x``
    comes to 64 KiB or more, must hold less than its own blocks and the whole of
    ``x`` (collecting every block, then one matmul, holds that much), read from
    the compiled programs.

    On one device (a gcd of 1) the ring has no step: a loop of ``n - 1`` hops
    runs no ``ppermute``, and the checker asks for ``jax.shard_map`` alone.

    How the arguments arrive: placed on the Explicit mesh ``axis_mesh("model",
    math.gcd(S, F))``, ``x`` as ``P("model", None)`` and ``w`` as ``P(None,
    "model")``.

    Args:
      x: activations, shape (S, D), S >= 1 and D >= 1; integer or floating point.
      w: weight, shape (D, F), F >= 1.

    Returns:
      ``x @ w``, shape (S, F), in the dtype ``jnp.matmul`` gives, its columns
      split over ``"model"`` (``P(None, "model")``).

    Raises:
      TypeError: if ``x`` or ``w`` is not a numeric array.
      ValueError: if either is not 2-D, a dimension is 0, or ``w`` has not
        ``D`` rows.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import collective_matmul_all_gather
      >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> collective_matmul_all_gather(x, jnp.array([[1.0, 0.0], [0.0, 10.0]]))
      Array([[ 1., 20.],
             [ 3., 40.]], dtype=float32)

      On 8 devices each holds 2 of the 16 columns, for every row:

      >>> y = collective_matmul_all_gather(jnp.ones((32, 4)), jnp.ones((4, 16)))
      >>> tuple(y.sharding.spec), y.addressable_shards[0].data.shape
      ((None, 'model'), (32, 2))
    """
    _check_inputs(x, w)
    traced = any(isinstance(a, jax.core.Tracer) for a in (x, w))
    # The devices split the rows of x and the columns of w: their count divides both.
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]), traced=traced)
    x = place(x, NamedSharding(mesh, P("model", None)))  # rows over "model"
    w = place(w, NamedSharding(mesh, P(None, "model")))  # columns over "model"
    return _all_gather_matmul(mesh)(x, w)


def _check_inputs(x: object, w: object) -> None:
    check_array(x, "x", ndim=2, layout="of shape (S, D)")
    check_array(w, "w", ndim=2, layout="of shape (D, F)")
    (rows, d), (d_w, columns) = np.shape(x), np.shape(w)
    if 0 in (rows, d, columns):
        msg = f"x and w must have no empty dimension, got shapes {np.shape(x)} and {np.shape(w)}"
        raise ValueError(msg)
    if d_w != d:
        msg = f"w has {d_w} rows but x has {d} columns: x must be (S, D) and w (D, F)"
        raise ValueError(msg)


def _multiply_round_the_ring(x_block: jax.Array, w_columns: jax.Array) -> jax.Array:
    """One device: its columns of ``x @ w``, one block of rows of ``x`` at a time."""
    n = jax.lax.axis_size("model")
    me = jax.lax.axis_index("model")
    rows = x_block.shape[0]
    # Each device sends its block to the previous one, so it receives the next one's.
    to_previous = [(i, (i - 1) % n) for i in range(n)]

    def place_rows(out: jax.Array, block: jax.Array, held: jax.Array) -> jax.Array:
        """``out`` with ``block @ w_columns`` written at the rows of block ``held``."""
        return jax.lax.dynamic_update_slice_in_dim(out, block @ w_columns, held * rows, axis=0)

    def step(i: int, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        out, block = carry
        block = jax.lax.ppermute(block, "model", perm=to_previous)  # the next block arrives
        return place_rows(out, block, (me + i) % n), block  # block me + i, multiplied

    first = x_block @ w_columns  # the block this device started with: rows of block `me`
    out = jnp.zeros((n * rows, first.shape[1]), first.dtype)
    out = place_rows(out, x_block, me)
    # n - 1 steps, unrolled (as How to Scale Your Model writes it): with n = 1, none.
    out, _ = jax.lax.fori_loop(1, n, step, (out, x_block), unroll=True)
    return out


@functools.cache
def _all_gather_matmul(mesh: Mesh) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Build, once per mesh, the compiled collective matmul."""
    return jax.jit(
        jax.shard_map(
            _multiply_round_the_ring,
            mesh=mesh,
            in_specs=(P("model", None), P(None, "model")),
            out_specs=P(None, "model"),  # every row, this device's columns
        )
    )


def _unsharded(x: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w


def _oracle(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return precise(x) @ precise(w)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic mistakes of the ring in a wrong output.

    - only the block of rows the device started with: every other block of rows zero;
    - the blocks written back where the device started, not where they came from:
      each device's columns hold its own block's product in every block of rows;
    - the ring turned the wrong way round while the rows are written as if it had not.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.collective_matmul_all_gather import _explain
      >>> x, w = np.arange(8.0).reshape(4, 2), np.eye(2, 4)
      >>> wrong = np.zeros((4, 4)); wrong[:2, :2] = (x @ w)[:2, :2]; wrong[2:, 2:] = (x @ w)[2:, 2:]
      >>> print(_explain(Case("c", (x, w)), x @ w, wrong))
      Each device computed only the rows of the block of x it started with...
    """
    x, w = (precise(np.asarray(a)) for a in case.args)
    got = precise(np.asarray(received))
    rows, columns = x.shape[0], w.shape[1]
    if got.shape != (rows, columns):
        return None
    full = x @ w

    def close(answer: np.ndarray) -> bool:
        scale = 1 + np.abs(answer).max(initial=0)
        return bool(np.allclose(got, answer, rtol=1e-3, atol=1e-4 * scale))

    for n in device_counts(math.gcd(rows, columns)):
        r, c = rows // n, columns // n
        own = np.zeros_like(full)
        repeated = np.zeros_like(full)
        reversed_ring = np.zeros_like(full)
        for j in range(n):
            cols = slice(j * c, (j + 1) * c)
            own[j * r : (j + 1) * r, cols] = full[j * r : (j + 1) * r, cols]
            repeated[:, cols] = np.tile(full[j * r : (j + 1) * r, cols], (n, 1))
            for step in range(n):
                came_from, written_at = (j - step) % n, (j + step) % n
                reversed_ring[written_at * r : (written_at + 1) * r, cols] = full[
                    came_from * r : (came_from + 1) * r, cols
                ]
        if close(own):
            return (
                f"Each device computed only the rows of the block of x it started with "
                f"({r} of {rows}), on {n} devices: the other blocks never reached it. Pass "
                "the block on round the ring with jax.lax.ppermute, n - 1 times, and "
                "multiply each block that arrives"
            )
        if close(repeated):
            return (
                f"Every block of {r} rows of a device's columns is the product of the block "
                f"of x it started with, on {n} devices: the blocks that arrived were not "
                "multiplied, or were written over the first. Multiply each block as it "
                "arrives, and write it at the rows it came from"
            )
        if n > 2 and close(reversed_ring):
            return (
                f"The blocks of rows are in the wrong places, on {n} devices: the ring "
                "passes blocks one way and the rows are written as if it passed them the "
                "other. A device that sends to i - 1 holds block (me + step) % n at each "
                "step"
            )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a device count up to 8, S and F multiples of it, float32."""
    n = int(rng.integers(1, 9))
    rows, columns = n * int(rng.integers(1, 5)), n * int(rng.integers(1, 4))
    d = int(rng.integers(1, 9))
    return _case(rng, f"random: S={rows}, D={d}, F={columns}", rows, d, columns)


def _case(rng: np.random.Generator, label: str, rows: int, d: int, columns: int) -> Case:
    return Case(
        label,
        (
            rng.normal(size=(rows, d)).astype(np.float32),
            rng.normal(size=(d, columns)).astype(np.float32),
        ),
    )


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261126)

    def case(label: str, rows: int, d: int, columns: int) -> Case:
        return _case(rng, label, rows, d, columns)

    return [
        Case(
            "example from the problem statement",
            (
                np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
                np.array([[1.0, 0.0], [0.0, 10.0]], np.float32),
            ),
        ),
        case("S=1: one device", 1, 3, 8),
        case("S=16, D=4, F=16: 8 devices, 2 rows each", 16, 4, 16),
        case("S=8, D=1, F=8: one row and one column per device", 8, 1, 8),
        case("S=12, D=5, F=18: 6 devices", 12, 5, 18),
        case("S=9, D=3, F=6: 3 devices", 9, 3, 6),
        Case(
            "int32 stays int32, 8 devices",
            (
                np.arange(-32, 32, dtype=np.int32).reshape(16, 4),
                np.arange(32, dtype=np.int32).reshape(4, 8) % 5,
            ),
        ),
        case("S=64, D=32, F=48: 8 devices", 64, 32, 48),
        case("S=256, D=128, F=64: x of 128 KiB, never whole on a device", 256, 128, 64),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: the most devices that divide both S and F."""
    return (usable_device_count(math.gcd(np.shape(args[0])[0], np.shape(args[1])[1]), devices),)


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``x`` by rows and ``w`` by columns over ``"model"``, as the contract says they arrive."""
    x, w = args
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    return (
        place(x, NamedSharding(mesh, P("model", None))),
        place(w, NamedSharding(mesh, P(None, "model"))),
    )


TECHNIQUE = Technique(
    collectives=(("collective-permute",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "x gathered whole is what the collective matmul avoids: pass its blocks "
            "round the ring with ppermute, multiplying each as it arrives",
        ),
        Forbidden("all-reduce", "no device needs a sum of other devices' values"),
    ),
    group=lambda args, devices: _mesh(args, devices)[0],
    axis="model",
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """``n - 1`` blocks of ``S / n`` rows of ``x``: what one ring all-gather of ``x`` sends.

    Examples:
      >>> import jax, numpy as np
      >>> n = jax.device_count()
      >>> _limits((np.ones((32, 4), np.float32), np.ones((4, 16))))["sent"] == (n - 1) * 32 // n * 16
      True
    """
    x, w = args
    n = usable_device_count(math.gcd(np.shape(x)[0], np.shape(w)[1]), jax.device_count())
    (rows, d), columns = np.shape(x), np.shape(w)[1]
    limits: dict[str, float] = {"sent": (n - 1) * (rows // n) * d * np.dtype(x.dtype).itemsize}
    whole = rows * d * np.dtype(x.dtype).itemsize
    if n > 1 and whole >= HELD_FROM:
        out = rows * (columns // n) * jnp.result_type(x.dtype, w.dtype).itemsize
        own = whole // n + d * (columns // n) * np.dtype(w.dtype).itemsize + out
        limits["held"] = own + whole - 1  # its blocks of x, w and the result; all of x
    return limits


HELD_FROM = 64 * 1024
"""The size of ``x`` from which the budget limits what a device holds (bytes): below it,
XLA's own buffers outweigh the blocks (as for ring attention)."""


BUDGET = Budget(
    _limits,
    "the ring passes each device's block of x on n - 1 times, one block of S / n rows "
    "each time, and multiplies each block as it arrives; sending w, the products, or x "
    "more than once round the ring sends more, and collecting every block before "
    "multiplying holds all of x",
)
"""What a solution may send per device: ``n - 1`` blocks of ``x``."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    return [
        Case("x a list, not an array", (x.tolist(), w), raises="TypeError"),
        Case("a bool w: not numeric", (x, w > 0), raises="TypeError"),
        Case("a 1-D x", (x[0], w), raises="ValueError"),
        Case("x with no rows (S = 0)", (x[:0], w), raises="ValueError"),
        Case("x of 3 columns, w of 2 rows", (x, w[:2]), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="collective_matmul_all_gather",
    title="Collective matmul: all-gather",
    reference=collective_matmul_all_gather,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-4,  # float32 products of up to 32 terms
    explain=_explain,
    generate=_generate,
    imports=(
        "import math",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        'from shard_tutorial import axis_mesh  # axis_mesh("model", length): a 1-D mesh',
    ),
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=Placement(axis=1, spec='P(None, "model")'),
    make_refusals=_refusals,
    folder="parallelism",
    arrange=_arrange,
    budget=BUDGET,
)
