"""Problem "Fully-sharded SGD": the data-parallel step with the weights split too.

Data parallelism keeps a whole copy of every parameter, and of its gradient, on
every device. Fully-sharded data parallelism (FSDP, ZeRO-3) splits the weights
over the same devices as the batch: each device holds a block of rows of ``w``
between steps. For the forward pass the blocks are gathered into the whole
``w`` (``jax.lax.all_gather``); differentiating through that gather gives its
transpose, a reduce-scatter (``psum_scatter``): each device receives the summed
gradient of its own block of rows only, so no device ever keeps the whole
gradient, and the update is done block by block.
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
from shard_tutorial.meshes import (
    data_mesh,
    data_mesh_for,
    device_counts,
    place,
    usable_device_count,
)
from shard_tutorial.problem import (
    Budget,
    Case,
    Forbidden,
    Placement,
    Problem,
    Technique,
    precise,
)

__all__ = ["PROBLEM", "fsdp_sgd_step"]


def fsdp_sgd_step(
    w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    """One SGD step of linear regression, fully sharded: ``w``'s rows split like the batch.

    The model, loss and step are those of ``data_parallel_sgd_step``. ``w``
    arrives split over the devices along its first axis (``P("data", None)``)
    and leaves split the same way; ``x`` and ``y`` are split by rows over the
    same devices; ``b`` (small) is replicated. The devices used are as many as
    divide both ``B`` and ``d_in`` (``data_mesh(math.gcd(B, d_in))``). Inside,
    ``w`` is gathered whole for the forward pass only, and its gradient is
    reduce-scattered back, so each device computes the update of its own rows.

    This problem practises fully-sharded data parallelism with
    ``jax.shard_map``: ``w`` stays split over ``"data"`` between steps, is
    gathered inside the step (an all-gather), and its gradient is
    reduce-scattered, so each device keeps the block of the new ``w`` it holds;
    ``w``'s gradient is never all-reduced whole. On a mesh of several devices a
    device may hold, while the step runs, its blocks of ``x``, ``y`` and ``w``
    and the whole ``b`` (twice: a copy is allowed), ``w`` whole twice (gathered,
    and its gradient before the reduce-scatter) and its rows' residuals twice,
    and 4 KiB besides; where ``x`` comes to 16 KiB or more, the batch is never
    gathered (the checker's budget, read from XLA's memory analysis of the
    compiled programs).

    How the arguments arrive: ``w`` placed on the Explicit mesh
    ``data_mesh(math.gcd(B, d_in))`` as ``P("data", None)``; ``b``, ``x`` and ``y``
    each as a ``jax.Array`` on the default device, not split; ``lr`` as a Python
    number.

    Args:
      w: weights, shape (d_in, d_out), floating-point; any layout is accepted.
      b: bias, shape (d_out,), floating-point.
      x: inputs, shape (B, d_in), B >= 1, floating-point.
      y: targets, shape (B, d_out), floating-point.
      lr: learning rate, a finite Python float.

    Returns:
      ``(w - lr * dL/dw, b - lr * dL/db)``: the new ``w`` split along its first
      axis (``P("data", None)``), the new ``b`` replicated (``P()``).

    Raises:
      TypeError: for a non-array, a dtype that is not floating-point, or an
        ``lr`` that is not a real number.
      ValueError: for shapes that do not fit together, an empty batch or output
        (no rows of ``x``, or no columns of ``w``), or an ``lr`` that is nan or
        infinite.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import fsdp_sgd_step
      >>> w, b = jnp.zeros((1, 1)), jnp.zeros(1)
      >>> x, y = jnp.array([[1.0], [2.0]]), jnp.array([[2.0], [4.0]])
      >>> fsdp_sgd_step(w, b, x, y, 0.1)
      (Array([[1.]], dtype=float32), Array([0.6], dtype=float32))

      On 8 devices, 16 rows of ``w`` leave as 8 blocks of 2 rows:

      >>> new_w, new_b = fsdp_sgd_step(jnp.zeros((16, 2)), jnp.zeros(2),
      ...                              jnp.ones((32, 16)), jnp.ones((32, 2)), 0.01)
      >>> tuple(new_w.sharding.spec), new_w.addressable_shards[0].data.shape
      (('data', None), (2, 2))
    """
    rate = check_step_inputs(w, b, x, y, lr)
    mesh = data_mesh_for(x, w, b, y, rate, length=math.gcd(x.shape[0], w.shape[0]))
    w = place(w, NamedSharding(mesh, P("data", None)))  # a block of rows on each device
    b = place(b, NamedSharding(mesh, P()))
    x, y = place((x, y), NamedSharding(mesh, P("data")))
    return _fsdp_step(mesh)(w, b, x, y, rate)


def _local_step(
    w_rows: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """One device's part: its rows of ``w`` and of the batch, the whole ``b``."""

    def loss(w_rows: jax.Array, b: jax.Array) -> jax.Array:
        w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)  # the whole w, for now
        block_loss = jnp.mean((x @ w + b - y) ** 2)  # this device's rows of the batch
        return jax.lax.pmean(block_loss, "data")  # the mean over the whole batch

    # The transpose of all_gather is a reduce-scatter: dw_rows is the gradient of
    # this device's rows of w, summed over every device's batch rows.
    dw_rows, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)
    return w_rows - lr * dw_rows, b - lr * db


@functools.cache
def _fsdp_step(mesh: Mesh) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """Build, once per mesh, the compiled fully-sharded step."""
    return jax.jit(
        jax.shard_map(
            _local_step,
            mesh=mesh,
            in_specs=(P("data", None), P(), P("data"), P("data"), P()),  # w, b, x, y, lr
            out_specs=(P("data", None), P()),  # w stays split by rows; b replicated
        )
    )


def _shared_devices(args: tuple[Any, ...], devices: int) -> int:
    """How many devices split both the batch and ``w``'s rows, out of ``devices``."""
    w, _, x, _, _ = args
    return usable_device_count(math.gcd(np.shape(x)[0], np.shape(w)[0]), devices)


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as the contract says they arrive: ``w`` split by rows."""
    w, b, x, y, lr = args
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    return (place(w, NamedSharding(mesh, P("data", None))), b, x, y, lr)


FSDP_GRADIENTS_SUMMED = (
    "JAX already sums the gradients over the devices: w's by the reduce-scatter that is the "
    "transpose of its all_gather, b's by the all-reduce that is the transpose of its "
    "implicit broadcast"
)


def _explain(
    case: Case,
    expected: tuple[np.ndarray, np.ndarray],
    received: tuple[np.ndarray, np.ndarray],
) -> str | None:
    """Recognise the fully-sharded step's classic mistakes in a wrong ``(w, b)``.

    A ``psum`` (or ``pmean``) of the gradients ``jax.grad`` returns: ``w``'s
    gradient arrives reduce-scattered, each device holding the summed gradient
    of its own rows, so an all-reduce of it adds up the gradients of different
    rows; ``b``'s arrives summed, so a ``psum`` multiplies its step by the
    device count. Then the data-parallel mistakes (:func:`explain_step`), worded
    for a weight split by rows.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.linear_regression import make_case, oracle_step
      >>> from shard_tutorial.problems.fsdp_sgd_step import _explain
      >>> case = make_case(np.random.default_rng(0), "B=8, d_in=4", 8, 4, 2)
      >>> w, b, *_ = case.args
      >>> right_w, right_b = oracle_step(*case.args)
      >>> rows = (right_w - w).reshape(4, 1, 2).sum(axis=0)  # 4 blocks' steps added up
      >>> psummed = (w + np.tile(rows, (4, 1)), b + 4 * (right_b - b))
      >>> print(_explain(case, (right_w, right_b), psummed))
      Each device's block of w moved by the gradients of all 4 blocks of rows added up...
    """
    w, b, x, y, lr = case.args
    got_w, got_b = (precise(np.asarray(r)) for r in received)
    right_w, right_b = oracle_step(w, b, x, y, lr)
    step_w, step_b = right_w - precise(w), right_b - precise(b)
    moved_w, moved_b = got_w - precise(w), got_b - precise(b)
    if got_w.shape != step_w.shape or got_b.shape != step_b.shape:
        return None

    def close(a: np.ndarray, c: np.ndarray) -> bool:
        return bool(np.allclose(a, c, rtol=1e-3, atol=1e-5 * (1 + np.abs(c).max(initial=0))))

    d_in, d_out = step_w.shape
    for devices in device_counts(math.gcd(x.shape[0], d_in)):
        rows = step_w.reshape(devices, d_in // devices, d_out).sum(axis=0)
        every_block = np.tile(rows, (devices, 1))  # each block: all blocks' steps added up
        if close(step_w, every_block):
            continue  # the blocks' steps coincide: nothing to tell apart
        if close(moved_w, every_block) and close(moved_b, devices * step_b):
            return (
                f"Each device's block of w moved by the gradients of all {devices} blocks of "
                f"rows added up, and b by {devices} times its step: a psum of the gradients "
                "jax.grad returned, as in the pmap-era recipe. They are already combined: "
                "w's arrives reduce-scattered (the transpose of its all_gather: each device "
                "holds the whole batch's gradient of its own rows) and b's summed over the "
                "devices; an extra all-reduce adds up the gradients of different rows of w. "
                "Take them as they are"
            )
        if close(moved_w, every_block / devices) and close(moved_b, step_b):
            return (
                f"Each device's block of w moved by the mean of the gradients of all {devices} "
                "blocks of rows: a pmean of the gradient jax.grad returned, which arrives "
                "reduce-scattered (the transpose of the all_gather: each device holds the "
                "whole batch's gradient of its own rows); an extra all-reduce mixes the "
                "gradients of different rows of w. Take it as it is"
            )
        if close(moved_w, step_w) and close(moved_b, devices * step_b):
            return (
                f"w is right, but b moved by {devices} times its step: a psum of b's "
                "gradient, which JAX had already summed over the devices (the transpose "
                "of b's implicit broadcast). Take it as it is"
            )
    return explain_step(case, expected, received, already_summed=FSDP_GRADIENTS_SUMMED)


def _generate(rng: np.random.Generator) -> Case:
    """One random case: B and d_in multiples of a common device count from 1 to 8."""
    devices = int(rng.integers(1, 9))
    batch = devices * int(rng.integers(1, 9))
    d_in = devices * int(rng.integers(1, 4))
    d_out = int(rng.integers(1, 6))
    lr = float(np.round(rng.uniform(0.01, 0.3), 3))
    return make_case(
        rng, f"random: B={batch}, d_in={d_in}, d_out={d_out}, lr={lr}", batch, d_in, d_out, lr
    )


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261124)
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
        make_case(rng, "B=32, d_in=16: 2 rows of w on each of 8 devices", 32, 16, 2, lr=0.05),
        make_case(rng, "B=16, d_in=8: one row of w per device", 16, 8, 3),
        make_case(rng, "B=12, d_in=6: split over 6 of 8 devices", 12, 6, 2),
        make_case(rng, "B=8, d_in=12: 4 devices divide both", 8, 12, 2, lr=0.05),
        make_case(rng, "B=5, d_in=3: no common divisor, one device", 5, 3, 2),
        make_case(rng, "lr=0: the parameters do not move", 8, 8, 2, lr=0.0),
        make_case(rng, "B=256, d_in=64, d_out=4", 256, 64, 4, lr=0.02),
    ]


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``data_mesh(math.gcd(B, d_in))``."""
    return (_shared_devices(args, devices),)


def _b_and_the_loss(args: tuple[Any, ...]) -> int:
    """The bytes of ``b``'s gradient and :data:`SCALARS` numbers besides (the loss, a count).

    What a right step may all-reduce, as often as it likes (``jax.grad`` already sums
    ``b``'s gradient; a ``pmean`` after it changes nothing): all-reduces no larger are
    left out of what :data:`TECHNIQUE` limits together.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.fsdp_sgd_step import _b_and_the_loss
      >>> _b_and_the_loss((np.ones((8, 3), np.float32), np.ones(3, np.float32)))
      28
    """
    b = np.asarray(args[1])
    # As XLA's CPU backend sends them (bfloat16 as float32): the collective's own size.
    return (int(np.size(b)) + SCALARS) * max(b.dtype.itemsize, bytes_per_number(b.dtype))


SCALARS = 4
"""How many numbers besides ``b``'s gradient a right step may all-reduce (the loss, counts)."""


TECHNIQUE = Technique(
    collectives=(("all-gather",), ("reduce-scatter",)),
    forbidden=(
        Forbidden(
            "all-reduce",
            "w's gradient must be reduce-scattered, each device keeping its block, not "
            "all-reduced whole as in data parallelism",
            at_least=lambda args: int(np.size(args[0])) * np.asarray(args[0]).dtype.itemsize,  # w's
        ),
        Forbidden(
            "all-reduce",
            "all-reduced together, these carry as much as w's gradient: all-reduced in "
            "pieces, it is still all-reduced whole; reduce-scatter it, each device keeping "
            "its block",
            at_least=lambda args: int(np.size(args[0])) * np.asarray(args[0]).dtype.itemsize,
            pieces=_b_and_the_loss,
        ),
    ),
    hidden=lambda args: gradient_unused(args[4]),  # lr=0
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """What the statement lets a device hold while a program of the step runs.

    Its own blocks of ``x``, ``y`` and ``w`` and the whole ``b``, twice (in and out,
    or a copy: a reshard of an argument is no mistake); ``w`` whole twice (the
    gathered weights, and the gradient before it is reduce-scattered); the
    residuals ``x @ w + b - y`` of its rows twice (and their gradient); and 4 KiB
    for scalars and XLA's small buffers. What the statement keeps split, the
    batch above all, must never be whole on a device: gathering ``x`` holds
    ``B x d_in`` more. Asked only where ``x`` comes to :data:`HELD_FROM` bytes or
    more (below, XLA's own buffers outweigh the blocks), and on several devices.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.fsdp_sgd_step import _limits
      >>> args = (np.ones((64, 4), np.float32), np.ones(4, np.float32),
      ...         np.ones((256, 64), np.float32), np.ones((256, 4), np.float32), 0.1)
      >>> jax.device_count() == 1 or _limits(args)["held"] == (
      ...     2 * (32 * 64 * 4 + 32 * 4 * 4 + 8 * 4 * 4 + 16) + 2 * 1024 + 2 * 512 + 4096
      ... )
      True
    """
    n = _shared_devices(args, jax.device_count())
    w, b, x, y, _ = args
    (batch, d_in), d_out = np.shape(x), np.shape(w)[1]
    item = max(np.dtype(a.dtype).itemsize for a in (w, b, x, y))
    if n <= 1 or batch * d_in * item < HELD_FROM:
        return {}
    blocks = (batch // n) * (d_in + d_out) * item + (d_in // n) * d_out * item + d_out * item
    whole_w = d_in * d_out * item
    residuals = (batch // n) * d_out * item
    return {"held": 2 * blocks + 2 * whole_w + 2 * residuals + 4096}


HELD_FROM = 16 * 1024
"""The size of ``x`` from which the budget limits what a device holds (bytes)."""


BUDGET = Budget(
    _limits,
    "FSDP keeps the batch and w split over the devices: a device may hold its own "
    "blocks (twice), the gathered w and its gradient before the reduce-scatter, and "
    "its rows' residuals; gathering the batch, or keeping more whole copies of w, "
    "holds more",
)
"""What a solution may hold per device, from the statement's words."""


PROBLEM = Problem(
    name="fsdp_sgd_step",
    title="Fully-sharded SGD",
    reference=fsdp_sgd_step,
    oracle=oracle_step,
    make_cases=_cases,
    unsharded=unsharded_step,
    rtol=1e-5,
    atol=1e-5,  # float32 matmuls and sums of up to 256 rows, in another order than NumPy's
    explain=_explain,
    imports=(
        "import math",
        "",
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        "from shard_tutorial import data_mesh  # a mesh that divides any length",
    ),
    generate=_generate,
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=(
        Placement(axis=0, blocks=_shared_devices, spec='P("data", None)'),
        Placement(axis=None),
    ),
    make_refusals=step_refusals,
    folder="training",
    outputs=("w", "b"),
    arrange=_arrange,
    budget=BUDGET,
)
