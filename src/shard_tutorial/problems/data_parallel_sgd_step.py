"""Problem "Data-parallel SGD": one training step with the batch split over the devices.

Data parallelism keeps a whole copy of the parameters on every device and splits
the batch: each device computes the loss of its block of rows. Inside
:func:`jax.shard_map` with ``check_vma=True`` (the default), a replicated
parameter (``in_specs=P()``) is *invariant* over the ``"data"`` axis, and using
it in a per-device computation broadcasts it to every device implicitly. The
transpose of that broadcast is a sum: ``jax.grad`` of a per-device loss with
respect to a replicated parameter is already summed over the devices. So the
loss to differentiate is the mean over the whole batch, ``jax.lax.pmean`` of the
blocks' means (the blocks have equal sizes), and its gradient needs no further
collective: the pmap-era recipe (a local loss, then a ``psum`` or ``pmean`` of
the gradients) sums twice and takes a step 8 or 64 times too long on 8 devices.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.communication import bytes_per_number
from shard_tutorial.linear_regression import (
    check_step_inputs,
    explain_step,
    gradient_unused,
    make_case,
    oracle_step,
    step_refusals,
    unsharded_step,
)
from shard_tutorial.meshes import data_mesh_for, place, usable_device_count
from shard_tutorial.problem import Budget, Case, Forbidden, Placement, Problem, Stays, Technique

__all__ = ["PROBLEM", "data_parallel_sgd_step"]


def data_parallel_sgd_step(
    w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    """One SGD step of linear regression, data-parallel: the batch split, the parameters replicated.

    The model is ``pred = x @ w + b`` and the loss ``mean((pred - y) ** 2)`` over
    every element of the whole batch. The rows of ``x`` and ``y`` are split over
    the devices (as many as divide ``B``); ``w`` and ``b`` are copied to every
    device, and every device ends the step with the same new copy.

    This problem practises data parallelism with ``jax.shard_map``: the batch
    stays split over ``"data"``, each device computes the gradients of its own
    block, and one all-reduce averages them (``jax.lax.pmean``, or the ``psum``
    that ``jax.grad`` inserts for replicated parameters). The mesh is
    ``data_mesh(B)``. Each device sends what an all-reduce of the gradient sends,
    twice at most (a ``pmean`` after the ``psum`` ``jax.grad`` inserts changes
    nothing), and a few numbers besides, such as the loss (the checker's budget,
    read from the compiled programs).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split; each number as a Python number.

    Args:
      w: weights, shape (d_in, d_out), floating-point.
      b: bias, shape (d_out,), floating-point.
      x: inputs, shape (B, d_in), B >= 1, floating-point.
      y: targets, shape (B, d_out), floating-point.
      lr: learning rate, a finite Python float.

    Returns:
      ``(w - lr * dL/dw, b - lr * dL/db)``, both replicated over the devices
      (``out_specs=P()``), in the dtypes JAX's promotion gives (float32 for
      float32 inputs).

    Raises:
      TypeError: for a non-array, a dtype that is not floating-point, or an
        ``lr`` that is not a real number.
      ValueError: for shapes that do not fit together, an empty batch or output
        (no rows of ``x``, or no columns of ``w``), or an ``lr`` that is nan or
        infinite.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import data_parallel_sgd_step
      >>> w, b = jnp.zeros((1, 1)), jnp.zeros(1)
      >>> x, y = jnp.array([[1.0], [2.0]]), jnp.array([[2.0], [4.0]])
      >>> data_parallel_sgd_step(w, b, x, y, 0.1)
      (Array([[1.]], dtype=float32), Array([0.6], dtype=float32))

      On 8 devices a batch of 16 is split 8 ways, and both results are replicated:

      >>> x, y = jnp.ones((16, 3)), jnp.ones((16, 2))
      >>> new_w, new_b = data_parallel_sgd_step(jnp.zeros((3, 2)), jnp.zeros(2), x, y, 0.1)
      >>> tuple(new_w.sharding.spec), len(new_w.sharding.device_set)
      ((None, None), 8)
    """
    rate = check_step_inputs(w, b, x, y, lr)  # a float, or a tracer under jax.jit
    mesh = data_mesh_for(x, w, b, y, rate)
    w, b = place((w, b), NamedSharding(mesh, P()))  # a whole copy on every device
    x, y = place((x, y), NamedSharding(mesh, P("data")))  # a block of rows on each
    return _sgd_step(mesh)(w, b, x, y, rate)


def _local_step(
    w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """One device's part of the step: its block of rows, the whole parameters."""

    def loss(w: jax.Array, b: jax.Array) -> jax.Array:
        block_loss = jnp.mean((x @ w + b - y) ** 2)  # this device's rows only
        return jax.lax.pmean(block_loss, "data")  # the mean over the whole batch

    # w and b are invariant over "data" (in_specs=P()): their gradient is already
    # summed over the devices, so it is the gradient of the whole batch's loss.
    dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
    return w - lr * dw, b - lr * db


@functools.cache
def _sgd_step(mesh: Mesh) -> jax.stages.Wrapped:
    """Build, once per mesh, the compiled data-parallel step."""
    return jax.jit(
        jax.shard_map(
            _local_step,
            mesh=mesh,
            in_specs=(P(), P(), P("data"), P("data"), P()),  # w, b, x, y, lr
            out_specs=(P(), P()),  # the same new w and b on every device
        )
    )


def _generate(rng: np.random.Generator) -> Case:
    """One random case: B a product of two numbers from 1 to 8, lr from 0.01 to 0.5.

    Most such batches split over several devices; d_in and d_out are 1 to 6.
    """
    batch = int(rng.integers(1, 9) * rng.integers(1, 9))
    d_in, d_out = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    lr = float(np.round(rng.uniform(0.01, 0.5), 3))
    return make_case(
        rng, f"random: B={batch}, d_in={d_in}, d_out={d_out}, lr={lr}", batch, d_in, d_out, lr
    )


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261123)
    example = Case(
        "example from the problem statement",
        (
            np.zeros((1, 1), np.float32),
            np.zeros(1, np.float32),
            np.array([[1.0], [2.0]], np.float32),
            np.array([[2.0], [4.0]], np.float32),
            0.1,
        ),
    )
    return [
        example,
        make_case(rng, "B=16: 2 rows on each of 8 devices", 16, 3, 2),
        make_case(rng, "B=12: split over 6 of 8 devices", 12, 4, 3),
        make_case(rng, "B=5: 8 devices do not divide it", 5, 2, 2),
        make_case(rng, "B=7: split over 7 of 8 devices", 7, 3, 1),
        make_case(rng, "B=13, a prime above 8: one device", 13, 2, 3),
        make_case(rng, "a batch of one row", 1, 3, 2),
        make_case(rng, "lr=0: the parameters do not move", 8, 3, 2, lr=0.0),
        make_case(rng, "B=64, d_in=8, d_out=4", 64, 8, 4, lr=0.05),
        make_case(rng, "B=256, a longer step (lr=0.5)", 256, 5, 3, lr=0.5),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``data_mesh(B)``, B the rows of x (the third argument)."""
    return (usable_device_count(np.shape(args[2])[0], devices),)


TECHNIQUE = Technique(
    collectives=(("all-reduce",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "each device must work on its own block of the batch, not gather it whole",
        ),
    ),
    hidden=lambda args: gradient_unused(args[4]),  # lr=0
    stays=Stays(
        (2, 3),
        "x or y (the batch)",
        (
            "the batch stays split over 'data': each device computes the gradient of its own "
            "rows, and one all-reduce averages the gradients"
        ),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """What a device may send: the gradient's all-reduce, twice at most, and a few numbers.

    An all-reduce of ``w``'s and ``b``'s gradients sends ``2 (n - 1) / n`` of their bytes
    from each device (the ring's figure,
    :func:`shard_tutorial.collective_costs.ring_bytes`), with room for
    :data:`SCALARS` numbers besides (the loss, a count of rows), and twice that in
    all: a step may all-reduce the gradient again (``jax.lax.pmean`` after the
    ``psum`` that ``jax.grad`` inserts). Gathering the batch sends more wherever the
    batch outweighs twice the parameters.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.data_parallel_sgd_step import _limits
      >>> w, b, x = np.ones((3, 2), np.float32), np.ones(2, np.float32), np.ones((16, 3), np.float32)
      >>> n = min(jax.device_count(), 8)
      >>> _limits((w, b, x, x[:, :2], 0.1)) == {"sent": 2 * 2 * (n - 1) / n * (6 + 2 + 4) * 4}
      True
    """
    w, b = args[0], args[1]
    n = _mesh(args, jax.device_count())[0]
    per = max(bytes_per_number(np.asarray(a).dtype) for a in (w, b))
    numbers = int(np.size(w)) + int(np.size(b)) + SCALARS
    return {"sent": 2 * 2 * (n - 1) / n * numbers * per}


SCALARS = 4
"""How many numbers besides the gradient a step may all-reduce (the loss, counts)."""


BUDGET = Budget(
    _limits,
    "data parallelism sends an all-reduce of the gradient (twice at most) and a few numbers; "
    "gathering the batch, or summing zero-padded or masked blocks of it, sends more",
)
"""What a solution may send per device."""


PROBLEM = Problem(
    name="data_parallel_sgd_step",
    title="Data-parallel SGD",
    reference=data_parallel_sgd_step,
    oracle=oracle_step,
    make_cases=_cases,
    unsharded=unsharded_step,
    rtol=1e-5,
    atol=1e-5,  # float32 matmuls and sums of up to 256 rows, in another order than NumPy's
    explain=explain_step,
    imports=(
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        "from shard_tutorial import data_mesh  # a mesh that divides any length",
    ),
    generate=_generate,
    technique=TECHNIQUE,
    budget=BUDGET,
    mesh=_mesh,
    placement=(Placement(axis=None), Placement(axis=None)),
    make_refusals=step_refusals,
    folder="training",
    outputs=("w", "b"),
)
