"""Problem "Data-parallel NNX step": the data-parallel SGD step, with Flax NNX and optax.

The same step as :mod:`~shard_tutorial.problems.data_parallel_sgd_step`, written
as a Flax user writes it: an ``nnx.Linear`` model, an ``nnx.Optimizer`` holding
``optax.sgd(lr)``, ``nnx.grad`` of the mean squared error, ``optimizer.update``.
Flax 0.12's modules are pytrees, so the model goes through :func:`jax.shard_map`
as it is, replicated (``P()``), while the batch is split over ``"data"``. The
rule for the gradient is the one of the plain step: inside ``shard_map`` with
``check_vma=True``, the gradient of a replicated parameter is already summed over
the devices, so the loss to differentiate is the ``jax.lax.pmean`` of the blocks'
means, and no collective is added to the gradients. ``nnx.grad`` and
``nnx.Optimizer`` change nothing about that: the pmap-era recipe (a local loss,
a ``psum`` of the gradients) still takes a step 8 or 64 times too long.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax  # type: ignore[import-untyped]
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.communication import bytes_per_number
from shard_tutorial.linear_regression import (
    check_step_inputs,
    explain_step,
    gradient_unused,
    make_case,
    oracle_step,
)
from shard_tutorial.meshes import data_mesh_for, place, usable_device_count
from shard_tutorial.problem import Budget, Case, Forbidden, Placement, Problem, Stays, Technique
from shard_tutorial.problems._linear import linear_start
from shard_tutorial.validation import check_array, require_whole_number

__all__ = ["PROBLEM", "nnx_data_parallel_step"]


def nnx_data_parallel_step(
    seed: int, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    """One optax SGD step of an ``nnx.Linear`` model, data-parallel: the batch split, the model copied.

    Builds ``nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(seed))`` once,
    then takes one ``optax.sgd(lr)`` step with ``nnx.Optimizer`` on the loss
    ``mean((model(x) - y) ** 2)`` over every element of the whole batch. The rows
    of ``x`` and ``y`` are split over the devices (as many as divide ``B``); the
    model goes to every device whole, through ``jax.shard_map`` as a pytree, and
    every device ends the step with the same updated model.

    This problem practises data parallelism with ``jax.shard_map`` on a Flax
    NNX model: the batch stays split over ``"data"``, each device computes the
    gradients of its own block, and one all-reduce averages them. The mesh is
    ``data_mesh(B)``. Each device sends what an all-reduce of the gradients sends,
    twice at most, and a few numbers besides, such as the loss (the checker's
    budget, read from the compiled programs).

    How the arguments arrive: each array as a ``jax.Array`` on the default device,
    not split; each number as a Python number.

    Args:
      seed: seed of the model's initial parameters, a whole number (``3`` or
        ``3.0``).
      x: inputs, shape (B, d_in), B >= 1 and d_in >= 1, floating-point.
      y: targets, shape (B, d_out), d_out >= 1, floating-point.
      lr: learning rate, a finite Python float.

    Returns:
      The updated ``(kernel, bias)`` of the model, ``jax.Array`` of shapes
      (d_in, d_out) and (d_out,), float32 (``nnx.Linear``'s parameter dtype), both
      replicated over the devices (``out_specs=P()``).

    Raises:
      TypeError: for a seed that is not a number, a non-array, a dtype that is not
        floating-point, or an ``lr`` that is not a real number.
      ValueError: for a fractional seed, shapes that do not fit together, an empty
        batch, input or output, or an ``lr`` that is nan or infinite.

    Examples:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from shard_tutorial import nnx_data_parallel_step
      >>> x, y = jnp.array([[1.0], [2.0]]), jnp.array([[2.0], [4.0]])
      >>> kernel, bias = nnx_data_parallel_step(0, x, y, 0.1)
      >>> kernel, bias
      (Array([[1.535...]], dtype=float32), Array([0.278...], dtype=float32))

      The same step as the plain one, from the model's initial parameters:

      >>> from shard_tutorial import data_parallel_sgd_step
      >>> model = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
      >>> w, b = data_parallel_sgd_step(model.kernel[...], model.bias[...], x, y, 0.1)
      >>> bool(jnp.allclose(w, kernel)), bool(jnp.allclose(b, bias))
      (True, True)

      On 8 devices a batch of 16 is split 8 ways, and both results are replicated:

      >>> kernel, bias = nnx_data_parallel_step(0, jnp.ones((16, 3)), jnp.ones((16, 2)), 0.1)
      >>> tuple(kernel.sharding.spec), len(kernel.sharding.device_set)
      ((None, None), 8)
    """
    seed = require_whole_number(seed, "seed")
    check_array(x, "x", ndim=2, layout="of shape (B, d_in)")
    check_array(y, "y", ndim=2, layout="of shape (B, d_out)")
    if x.shape[1] == 0 or y.shape[1] == 0:
        msg = (
            f"x and y need at least one column each (d_in >= 1, d_out >= 1), got x of shape "
            f"{x.shape} and y of shape {y.shape}: nnx.Linear has no parameters to initialise"
        )
        raise ValueError(msg)
    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(seed))  # built once
    rate = check_step_inputs(*_parameters(model), x, y, lr)
    mesh = data_mesh_for(x, y, model, rate)
    model = place(model, NamedSharding(mesh, P()))  # a whole copy on every device
    x, y = place((x, y), NamedSharding(mesh, P("data")))  # a block of rows on each
    model = _sgd_step(mesh)(model, x, y, rate)
    return _parameters(model)


def _parameters(model: nnx.Linear) -> tuple[jax.Array, jax.Array]:
    """The arrays of the model's kernel and bias (an ``nnx.Param`` holds one: ``param[...]``)."""
    assert model.bias is not None  # nnx.Linear has a bias unless built with use_bias=False
    return model.kernel[...], model.bias[...]


def _local_step(model: nnx.Linear, x: jax.Array, y: jax.Array, lr: jax.Array) -> nnx.Linear:
    """One device's part of the step: its block of rows, its whole copy of the model."""
    # Built here, where lr is an operand: an optax transformation made outside would be
    # part of the jitted function's static arguments, a new one (and a compile) each call.
    optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)

    def loss(model: nnx.Linear) -> jax.Array:
        block_loss = jnp.mean((model(x) - y) ** 2)  # this device's rows only
        return jax.lax.pmean(block_loss, "data")  # the mean over the whole batch

    # The parameters are invariant over "data" (in_specs=P()): their gradient is already
    # summed over the devices, so it is the gradient of the whole batch's loss.
    grads = nnx.grad(loss)(model)
    optimizer.update(model, grads)  # model.kernel and model.bias now hold the new values
    return model


@functools.cache
def _sgd_step(mesh: Mesh) -> Callable[..., nnx.Linear]:
    """Build, once per mesh, the compiled data-parallel step."""
    return jax.jit(
        jax.shard_map(
            _local_step,
            mesh=mesh,
            in_specs=(P(), P("data"), P("data"), P()),  # model, x, y, lr
            out_specs=P(),  # the same updated model on every device
        )
    )


def _oracle(seed: int, x: np.ndarray, y: np.ndarray, lr: float) -> tuple[np.ndarray, np.ndarray]:
    """The closed-form SGD step (NumPy, 64-bit) from the model's initial parameters."""
    w, b = linear_start(seed, x.shape[1], y.shape[1])
    return oracle_step(w, b, x, y, lr)


def _unsharded(seed: int, x: jax.Array, y: jax.Array, lr: float) -> tuple[jax.Array, jax.Array]:
    """The same step on one device, no mesh: ``nnx.grad`` and ``nnx.Optimizer`` as usual."""
    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))
    optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
    grads = nnx.grad(lambda model: jnp.mean((model(x) - y) ** 2))(model)
    optimizer.update(model, grads)
    return _parameters(model)


def _explain(
    case: Case, expected: tuple[np.ndarray, np.ndarray], received: tuple[np.ndarray, np.ndarray]
) -> str | None:
    """The classic data-parallel mistakes (:func:`explain_step`), from the initial parameters."""
    seed, x, y, lr = case.args
    w, b = linear_start(seed, x.shape[1], y.shape[1])
    return explain_step(Case(case.label, (w, b, x, y, lr)), expected, received)


def _case(
    rng: np.random.Generator,
    label: str,
    batch: int,
    d_in: int,
    d_out: int,
    lr: float = 0.1,
    seed: float | None = None,
) -> Case:
    """A case with the data of :func:`make_case` (its ``w`` and ``b`` unused: the seed sets them)."""
    _w, _b, x, y, lr = make_case(rng, label, batch, d_in, d_out, lr).args
    return Case(label, (int(rng.integers(0, 2**16)) if seed is None else seed, x, y, lr))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261124)
    example = Case(
        "example from the problem statement",
        (0, np.array([[1.0], [2.0]], np.float32), np.array([[2.0], [4.0]], np.float32), 0.1),
    )
    return [
        example,
        _case(rng, "B=16: 2 rows on each of 8 devices", 16, 3, 2),
        _case(rng, "B=12: split over 6 of 8 devices", 12, 4, 3),
        _case(rng, "B=5: 8 devices do not divide it", 5, 2, 2),
        _case(rng, "B=13, a prime above 8: one device", 13, 2, 3),
        _case(rng, "a batch of one row", 1, 3, 2),
        _case(rng, "lr=0: the parameters do not move", 8, 3, 2, lr=0.0),
        _case(rng, "the seed a whole float (3.0)", 8, 2, 2, seed=3.0),
        _case(rng, "a large seed (2**31 + 5)", 24, 3, 3, seed=2**31 + 5),
        _case(rng, "B=64, d_in=8, d_out=4", 64, 8, 4, lr=0.05),
        _case(rng, "B=256, a longer step (lr=0.5)", 256, 5, 3, lr=0.5),
    ]


def _generate(rng: np.random.Generator) -> Case:
    """One random case: B a product of two numbers from 1 to 8, lr from 0.01 to 0.5."""
    batch = int(rng.integers(1, 9) * rng.integers(1, 9))
    d_in, d_out = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    lr = float(np.round(rng.uniform(0.01, 0.5), 3))
    return _case(
        rng, f"random: B={batch}, d_in={d_in}, d_out={d_out}, lr={lr}", batch, d_in, d_out, lr
    )


TECHNIQUE = Technique(
    collectives=(("all-reduce",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "each device must work on its own block of the batch, not gather it whole",
        ),
    ),
    hidden=lambda args: gradient_unused(args[3]),  # lr=0
    stays=Stays(
        (1, 2),
        "x or y (the batch)",
        (
            "the batch stays split over 'data': each device computes the gradient of its own "
            "rows, and one all-reduce averages the gradients"
        ),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    return [
        Case("a seed that is not a number ('0')", ("0", x, y, 0.1), raises="TypeError"),
        Case("x a list, not an array", (0, x.tolist(), y, 0.1), raises="TypeError"),
        Case("int32 x: not floating-point", (0, x.astype(np.int32), y, 0.1), raises="TypeError"),
        Case("lr a string ('0.1')", (0, x, y, "0.1"), raises="TypeError"),
        Case("a fractional seed (3.5)", (3.5, x, y, 0.1), raises="ValueError"),
        Case("x of 4 rows, y of 3", (0, x, y[:3], 0.1), raises="ValueError"),
        Case("an empty batch", (0, x[:0], y[:0], 0.1), raises="ValueError"),
        Case("lr nan", (0, x, y, float("nan")), raises="ValueError"),
    ]


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """What a device may send: the gradients' all-reduce, twice at most, and a few numbers.

    As :func:`shard_tutorial.problems.data_parallel_sgd_step._limits`: the gradients of
    the layer's kernel ``(d_in, d_out)`` and bias ``(d_out,)``, ``d_in`` and ``d_out`` read
    from ``x`` and ``y``.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.nnx_data_parallel_step import _limits
      >>> x, y = np.ones((16, 3), np.float32), np.ones((16, 2), np.float32)
      >>> n = min(jax.device_count(), 8)
      >>> _limits((0, x, y, 0.1)) == {"sent": 2 * 2 * (n - 1) / n * (6 + 2 + 4) * 4}
      True
    """
    x, y = np.asarray(args[1]), np.asarray(args[2])
    n = usable_device_count(int(x.shape[0]), jax.device_count())
    d_in, d_out = int(x.shape[1]), int(y.shape[1])
    per = max(bytes_per_number(a.dtype) for a in (x, y))
    return {"sent": 2 * 2 * (n - 1) / n * (d_in * d_out + d_out + SCALARS) * per}


SCALARS = 4
"""How many numbers besides the gradients a step may all-reduce (the loss, counts)."""


BUDGET = Budget(
    _limits,
    "data parallelism sends an all-reduce of the gradients (twice at most) and a few "
    "numbers; gathering the batch, or summing zero-padded or masked blocks of it, sends more",
)
"""What a solution may send per device."""


PROBLEM = Problem(
    name="nnx_data_parallel_step",
    title="Data-parallel NNX step",
    reference=nnx_data_parallel_step,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-5,  # float32 matmuls and sums of up to 256 rows, in another order than NumPy's
    explain=_explain,
    imports=(
        "import jax",
        "import jax.numpy as jnp",
        "import optax",
        "from flax import nnx",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        "from shard_tutorial import data_mesh  # a mesh that divides any length",
    ),
    generate=_generate,
    technique=TECHNIQUE,
    budget=BUDGET,
    placement=(Placement(axis=None), Placement(axis=None)),
    make_refusals=_refusals,
    folder="training",
    outputs=("kernel", "bias"),
)
