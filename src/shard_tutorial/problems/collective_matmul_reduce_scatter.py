"""Problem "Collective matmul: reduce-scatter": ``h @ w`` with partial sums passed round a ring.

When a layer's input ``h`` is split by columns over the ``"model"`` axis and its
weight ``w`` by rows over the same axis (the second weight of a Megatron MLP),
each device's product ``h[:, its columns] @ w[its rows]`` is a partial sum of the
whole output. A sequence-parallel layer wants the output split by rows: a
reduce-scatter of those partial sums. A *collective matmul* cuts the
reduce-scatter into its ring steps instead: each device computes the partial sum
of one block of rows, adds it to the running sum that arrives from its
neighbour with :func:`jax.lax.ppermute`, and passes the total on; after ``n - 1``
steps every block of rows has collected all ``n`` partial sums and sits on the
device it belongs to. On a TPU or GPU each transfer runs while the next block's
product is computed; the bytes sent are those of the reduce-scatter.
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

__all__ = ["PROBLEM", "collective_matmul_reduce_scatter"]


def collective_matmul_reduce_scatter(h: jax.Array, w: jax.Array) -> jax.Array:
    """``h @ w`` with ``h``'s columns over ``"model"``: partial sums passed round the ring.

    ``h`` (S, F) arrives with its columns split over the ``"model"`` axis, ``w``
    (F, D) with its rows split over it; the result (S, D) has its rows split
    over ``"model"``. The mesh is ``axis_mesh("model", math.gcd(S, F))``: the
    most devices, up to all of them, that divide both ``S`` and ``F``, so every
    shape works (a gcd of 1 is one device).

    This problem practises the reduce-scatter collective matmul with
    ``jax.shard_map`` and ``jax.lax.ppermute``: each device computes its partial
    sum of one block of rows at a time, adds the running sum its neighbour passed
    it and passes the total on round the ring, ``n - 1`` collective-permutes of
    one (S / n, D) block on a mesh of ``n`` devices, with no reduce-scatter and
    no all-reduce. That is the checker's budget too: each device may send
    ``n - 1`` blocks of ``S / n`` rows of the result, read from the compiled
    program.

    On one device (a gcd of 1) the ring has no step: a loop of ``n - 1`` hops
    runs no ``ppermute``, and the checker asks for ``jax.shard_map`` alone.

    How the arguments arrive: placed on the Explicit mesh ``axis_mesh("model",
    math.gcd(S, F))``, ``h`` as ``P(None, "model")`` and ``w`` as ``P("model",
    None)``.

    Args:
      h: activations, shape (S, F), S >= 1 and F >= 1; integer or floating point.
      w: weight, shape (F, D), D >= 1.

    Returns:
      ``h @ w``, shape (S, D), in the dtype ``jnp.matmul`` gives, its rows split
      over ``"model"`` (``P("model", None)``).

    Raises:
      TypeError: if ``h`` or ``w`` is not a numeric array.
      ValueError: if either is not 2-D, a dimension is 0, or ``w`` has not
        ``F`` rows.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import collective_matmul_reduce_scatter
      >>> h = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> collective_matmul_reduce_scatter(h, jnp.array([[1.0], [10.0]]))
      Array([[21.],
             [43.]], dtype=float32)

      On 8 devices each holds 4 of the 32 rows:

      >>> y = collective_matmul_reduce_scatter(jnp.ones((32, 16)), jnp.ones((16, 4)))
      >>> tuple(y.sharding.spec), y.addressable_shards[0].data.shape
      (('model', None), (4, 4))
    """
    _check_inputs(h, w)
    traced = any(isinstance(a, jax.core.Tracer) for a in (h, w))
    # The devices split the rows of the result and the columns of h: their count divides both.
    mesh = axis_mesh("model", math.gcd(*h.shape), traced=traced)
    h = place(h, NamedSharding(mesh, P(None, "model")))  # columns over "model"
    w = place(w, NamedSharding(mesh, P("model", None)))  # rows over "model"
    return _reduce_scatter_matmul(mesh)(h, w)


def _check_inputs(h: object, w: object) -> None:
    check_array(h, "h", ndim=2, layout="of shape (S, F)")
    check_array(w, "w", ndim=2, layout="of shape (F, D)")
    (rows, f), (f_w, d) = np.shape(h), np.shape(w)
    if 0 in (rows, f, d):
        msg = f"h and w must have no empty dimension, got shapes {np.shape(h)} and {np.shape(w)}"
        raise ValueError(msg)
    if f_w != f:
        msg = f"w has {f_w} rows but h has {f} columns: h must be (S, F) and w (F, D)"
        raise ValueError(msg)


def _sum_round_the_ring(h_columns: jax.Array, w_rows: jax.Array) -> jax.Array:
    """One device: its block of rows of ``h @ w``, the partial sums collected round the ring."""
    n = jax.lax.axis_size("model")
    me = jax.lax.axis_index("model")
    rows = h_columns.shape[0] // n
    to_next = [(i, (i + 1) % n) for i in range(n)]  # the running sums move to i + 1

    def partial_sum(block: jax.Array) -> jax.Array:
        """This device's share of ``h @ w`` for one block of rows: its columns times its rows."""
        return jax.lax.dynamic_slice_in_dim(h_columns, block * rows, rows, axis=0) @ w_rows

    def step(i: int, total: jax.Array) -> jax.Array:
        total = jax.lax.ppermute(total, "model", perm=to_next)  # a running sum arrives
        return total + partial_sum((me - 1 - i) % n)  # of block me - 1 - i: add this share

    # The sum of block b starts on device b + 1 and reaches device b after n - 1 steps,
    # unrolled (as How to Scale Your Model writes it): with n = 1, none. After the last step,
    # the sum is of block (me - n) % n = me: this device's rows.
    return jax.lax.fori_loop(1, n, step, partial_sum((me - 1) % n), unroll=True)


@functools.cache
def _reduce_scatter_matmul(mesh: Mesh) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Build, once per mesh, the compiled collective matmul."""
    return jax.jit(
        jax.shard_map(
            _sum_round_the_ring,
            mesh=mesh,
            in_specs=(P(None, "model"), P("model", None)),
            out_specs=P("model", None),  # this device's rows, every column
        )
    )


def _unsharded(h: jax.Array, w: jax.Array) -> jax.Array:
    return h @ w


def _oracle(h: np.ndarray, w: np.ndarray) -> np.ndarray:
    return precise(h) @ precise(w)


def _explain(case: Case, _expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic mistakes of the ring in a wrong output.

    - no running sum passed on: each block of rows is one device's partial sum;
    - the sums passed round but started one device off: every block of rows holds
      the sum of another block (a ring rotated by one).

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.collective_matmul_reduce_scatter import _explain
      >>> h, w = np.arange(8.0).reshape(2, 4), np.ones((4, 1))
      >>> mine = np.array([[0.0 + 1.0], [6.0 + 7.0]])  # each device's own partial sum
      >>> print(_explain(Case("c", (h, w)), h @ w, mine))
      Each block of rows holds one device's partial sum only...
    """
    h, w = (precise(np.asarray(a)) for a in case.args)
    got = precise(np.asarray(received))
    rows, columns = h.shape
    if got.shape != (rows, w.shape[1]):
        return None

    def close(answer: np.ndarray) -> bool:
        scale = 1 + np.abs(answer).max(initial=0)
        return bool(np.allclose(got, answer, rtol=1e-3, atol=1e-4 * scale))

    full = h @ w
    for n in device_counts(math.gcd(rows, columns)):
        r, c = rows // n, columns // n
        own = np.concatenate(
            [h[j * r : (j + 1) * r, j * c : (j + 1) * c] @ w[j * c : (j + 1) * c] for j in range(n)]
        )
        if close(own):
            return (
                f"Each block of rows holds one device's partial sum only (its {c} of the "
                f"{columns} columns of h), on {n} devices: the partial sums were never "
                "added. Pass each running sum on with jax.lax.ppermute and add this "
                "device's partial sum of the block it receives, n - 1 times"
            )
        if n > 1:
            for shift in range(1, n):
                if close(np.roll(full, -shift * r, axis=0)):
                    return (
                        f"Each block b of rows holds the sum of block b + {shift} (of {n} "
                        "blocks): the running sums were added up right but ended on the "
                        "wrong devices. Moving to i + 1, the sum of block b must start on "
                        "device b + 1 so that it ends, n - 1 steps later, on device b"
                    )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: a device count up to 8, S and F multiples of it, float32."""
    n = int(rng.integers(1, 9))
    rows, f = n * int(rng.integers(1, 5)), n * int(rng.integers(1, 4))
    d = int(rng.integers(1, 9))
    return _case(rng, f"random: S={rows}, F={f}, D={d}", rows, f, d)


def _case(rng: np.random.Generator, label: str, rows: int, f: int, d: int) -> Case:
    return Case(
        label,
        (
            rng.normal(size=(rows, f)).astype(np.float32),
            rng.normal(size=(f, d)).astype(np.float32),
        ),
    )


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261127)

    def case(label: str, rows: int, f: int, d: int) -> Case:
        return _case(rng, label, rows, f, d)

    return [
        Case(
            "example from the problem statement",
            (
                np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
                np.array([[1.0], [10.0]], np.float32),
            ),
        ),
        case("S=1: one device", 1, 8, 3),
        case("S=16, F=16, D=4: 8 devices, 2 rows each", 16, 16, 4),
        case("S=8, F=8, D=1: one row and one column per device", 8, 8, 1),
        case("S=12, F=18, D=5: 6 devices", 12, 18, 5),
        case("S=9, F=6, D=3: 3 devices", 9, 6, 3),
        Case(
            "int32 stays int32, 8 devices",
            (
                np.arange(-64, 64, dtype=np.int32).reshape(16, 8),
                np.arange(32, dtype=np.int32).reshape(8, 4) % 5,
            ),
        ),
        case("S=64, F=48, D=32: 8 devices", 64, 48, 32),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: the most devices that divide both S and F."""
    return (usable_device_count(math.gcd(*np.shape(args[0])), devices),)


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``h`` by columns and ``w`` by rows over ``"model"``, as the contract says they arrive."""
    h, w = args
    mesh = axis_mesh("model", math.gcd(*h.shape))
    return (
        place(h, NamedSharding(mesh, P(None, "model"))),
        place(w, NamedSharding(mesh, P("model", None))),
    )


TECHNIQUE = Technique(
    collectives=(("collective-permute",),),
    forbidden=(
        Forbidden(
            "reduce-scatter",
            "the collective matmul does the reduce-scatter's work itself, one ring step "
            "at a time, so that each step's transfer can hide behind a block's product",
        ),
        Forbidden(
            "all-reduce",
            "an all-reduce gives every device every row of the sum, where each needs its "
            "own block of rows only",
        ),
        Forbidden("all-gather", "neither h nor w is needed whole on any device"),
    ),
    group=lambda args, devices: _mesh(args, devices)[0],
    axis="model",
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """``n - 1`` blocks of ``S / n`` rows of the result: what a ring reduce-scatter sends.

    Examples:
      >>> import jax, numpy as np
      >>> n = jax.device_count()
      >>> _limits((np.ones((32, 16), np.float32), np.ones((16, 4), np.float32)))["sent"] == (
      ...     (n - 1) * 32 // n * 4 * 4
      ... )
      True
    """
    h, w = args
    n = usable_device_count(math.gcd(*np.shape(h)), jax.device_count())
    rows, d = np.shape(h)[0], np.shape(w)[1]
    itemsize = jnp.result_type(h.dtype, w.dtype).itemsize
    return {"sent": (n - 1) * (rows // n) * d * itemsize}


BUDGET = Budget(
    _limits,
    "the ring passes n - 1 running sums of S / n rows of the result from each device; "
    "sending h, w, or every row of the sum sends more",
)
"""What a solution may send per device: ``n - 1`` blocks of the result."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    h, w = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    return [
        Case("h a list, not an array", (h.tolist(), w), raises="TypeError"),
        Case("a bool w: not numeric", (h, w > 0), raises="TypeError"),
        Case("a 1-D h", (h[0], w), raises="ValueError"),
        Case("h with no rows (S = 0)", (h[:0], w), raises="ValueError"),
        Case("h of 3 columns, w of 2 rows", (h, w[:2]), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="collective_matmul_reduce_scatter",
    title="Collective matmul: reduce-scatter",
    reference=collective_matmul_reduce_scatter,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-4,  # float32 sums of up to 48 terms, in another order than NumPy's
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
    placement=Placement(axis=0, spec='P("model", None)'),
    make_refusals=_refusals,
    folder="parallelism",
    arrange=_arrange,
    budget=BUDGET,
)
