"""Problem "ZeRO Adam step": Adam's moments and the gradient split over the devices.

Adam keeps two moments per parameter, ``m`` and ``v``: with float32 weights that is
twice the weights' bytes again, and a data-parallel step keeps all of it, and the
whole gradient, on every device. ZeRO (Rajbhandari et al., 2020) keeps the weights
whole on every device but splits the optimizer's state and the gradient: each
device keeps ``m`` and ``v`` for its own block of rows of ``w``, receives the
gradient of those rows only, summed over every device's examples (a reduce-scatter,
``psum_scatter``, where data parallelism all-reduces the whole gradient), applies
Adam to its rows, and the new rows are gathered back into the whole ``w``
(``all_gather``): the same bytes as one all-reduce, and ``1/n`` of the optimizer's
state per device.
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
    Stays,
    Technique,
    precise,
)
from shard_tutorial.validation import (
    check_array,
    check_floating,
    require_finite_number,
    require_whole_number,
)

__all__ = ["B1", "B2", "EPS", "PROBLEM", "oracle", "unsharded", "zero_adam_step"]

B1 = 0.9
"""Adam's decay of the first moment (``optax.adam``'s default ``b1``)."""
B2 = 0.999
"""Adam's decay of the second moment (``optax.adam``'s default ``b2``)."""
EPS = 1e-8
"""Added to the root of the second moment (``optax.adam``'s default ``eps``)."""


def zero_adam_step(
    w: jax.Array,
    m: jax.Array,
    v: jax.Array,
    x: jax.Array,
    y: jax.Array,
    step: int,
    lr: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One Adam step of linear regression, ZeRO-style: moments and gradient split by rows.

    The model is ``x @ w`` and the loss ``mean((x @ w - y) ** 2)`` over all
    ``N x F`` entries of the whole batch. The devices used are ``n``, the
    largest count up to 8 that divides both ``N`` and ``D``
    (``data_mesh(math.gcd(N, D))``). ``w`` arrives whole on every device
    (``P()``); Adam's moments ``m`` and ``v`` arrive split by rows over
    ``"data"`` (``P("data", None)``), like ``x`` and ``y``. The step is Adam's,
    as ``optax.adam`` takes it, with ``b1 = 0.9``, ``b2 = 0.999``, ``eps =
    1e-8`` and bias correction, ``g`` the gradient of the loss with respect to
    ``w``::

        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g ** 2
        w = w - lr * (m / (1 - b1 ** step)) / (sqrt(v / (1 - b2 ** step)) + eps)

    This problem practises ZeRO's sharded optimizer state and gradients with
    ``jax.shard_map``: the gradient is reduce-scattered (``psum_scatter``) so
    that each device receives the summed gradient of the rows whose ``m`` and
    ``v`` it keeps, never all-reduced whole, Adam is applied to those rows only,
    and the new rows are all-gathered into the new ``w``. Two things to know:
    ``jax.grad`` of the replicated ``w`` inside ``shard_map`` already sums the
    gradient over the devices (an all-reduce), so a ``psum_scatter`` after it
    adds ``n`` sums together (``n`` times too large): differentiate with respect
    to a copy of ``w`` cast to varying (``jax.lax.pcast(w, "data",
    to="varying")``) to get this device's own part of the gradient; and a
    gathered result returned as ``P()`` needs ``all_gather(..., to="invarying")``
    (or ``check_vma=False``). Each device sends what one all-reduce of ``w``
    would, a reduce-scatter of the gradient and an all-gather of the new ``w``,
    and no more (the checker's budget, read from the compiled programs).

    How the arguments arrive: placed on the Explicit mesh
    ``data_mesh(math.gcd(N, D))``, ``w`` replicated (``P()``), ``m``, ``v``, ``x``
    and ``y`` split by rows (``P("data", None)``); ``step`` and ``lr`` as Python
    numbers.

    Args:
      w: weights, shape (D, F), floating-point; any layout is accepted.
      m: Adam's first moment, shape (D, F), floating-point.
      v: Adam's second moment, shape (D, F), floating-point, not negative.
      x: inputs, shape (N, D), N >= 1, floating-point.
      y: targets, shape (N, F), floating-point.
      step: the number of this step, counted from 1 (an int), for the bias
        correction.
      lr: learning rate, a finite Python float.

    Returns:
      ``(w, m, v)`` after the step: the new ``w`` replicated (``P()``), the new
      ``m`` and ``v`` split by rows (``P("data", None)``).

    Raises:
      TypeError: for a non-array, a dtype that is not floating-point, a
        ``step`` that is not a whole number or an ``lr`` that is not a real number.
      ValueError: for shapes that do not fit together, an empty batch or output
        (no rows of ``x``, or no columns of ``w``), a ``step`` below 1, or an
        ``lr`` that is nan or infinite.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import zero_adam_step
      >>> zeros = jnp.zeros((1, 1))
      >>> x, y = jnp.array([[1.0], [2.0]]), jnp.array([[2.0], [4.0]])
      >>> zero_adam_step(zeros, zeros, zeros, x, y, 1, 0.1)
      (Array([[0.1]], dtype=float32), Array([[-1.]], dtype=float32), Array([[0.1]], dtype=float32))

      On 8 devices, 16 rows of ``m`` leave as 8 blocks of 2 rows, ``w`` whole:

      >>> w, m, v = zero_adam_step(jnp.zeros((16, 2)), jnp.zeros((16, 2)), jnp.ones((16, 2)),
      ...                          jnp.ones((32, 16)), jnp.ones((32, 2)), 3, 0.01)
      >>> w.sharding.is_fully_replicated, m.addressable_shards[0].data.shape
      (True, (2, 2))
    """
    step, rate = _check_inputs(w, m, v, x, y, step, lr)
    mesh = data_mesh_for(x, w, m, v, y, rate, length=math.gcd(x.shape[0], w.shape[0]))
    w = place(w, NamedSharding(mesh, P()))  # the whole w on every device
    m, v = place((m, v), NamedSharding(mesh, P("data", None)))  # a block of rows each
    x, y = place((x, y), NamedSharding(mesh, P("data", None)))
    return _zero_step(mesh)(w, m, v, x, y, step, rate)


def _local_step(
    w: jax.Array,
    m_rows: jax.Array,
    v_rows: jax.Array,
    x: jax.Array,
    y: jax.Array,
    step: jax.Array,
    lr: jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One device's part: the whole ``w``, its rows of the moments and of the batch."""

    def loss(w: jax.Array) -> jax.Array:
        return jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")  # the whole batch's mean

    # w is the same on every device (invariant): its gradient would come back summed
    # over the devices, an all-reduce. A copy cast to varying has this device's own
    # part of the gradient instead, and the reduce-scatter sums only the rows it keeps.
    own = jax.grad(loss)(jax.lax.pcast(w, "data", to="varying"))
    g = jax.lax.psum_scatter(own, "data", scatter_dimension=0, tiled=True)
    rows = g.shape[0]
    w_rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * rows, rows, axis=0)
    new_w_rows, m_rows, v_rows = _adam_update(w_rows, m_rows, v_rows, g, step, lr)
    # to="invarying": typed the same on every device, so out_specs=P() is allowed.
    new_w = jax.lax.all_gather(new_w_rows, "data", axis=0, tiled=True, to="invarying")
    return new_w, m_rows, v_rows


def _adam_update(
    w: jax.Array, m: jax.Array, v: jax.Array, g: jax.Array, step: Any, lr: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Adam's update of ``w``, ``m`` and ``v`` from the gradient ``g``, as ``optax.adam``.

    Elementwise, so it applies to a block of rows as to the whole.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.zero_adam_step import _adam_update
      >>> _adam_update(jnp.zeros(2), jnp.zeros(2), jnp.zeros(2), jnp.array([-10.0, 1.0]), 1, 0.1)
      (Array([ 0.1, -0.1], dtype=float32), Array([-1. ,  0.1], dtype=float32), Array([0.1  , 0.001], dtype=float32))
    """
    b1, b2, eps = 0.9, 0.999, 1e-8  # optax.adam's defaults
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g**2
    m_hat = m / (1 - b1**step)
    v_hat = v / (1 - b2**step)
    return w - lr * m_hat / (jnp.sqrt(v_hat) + eps), m, v


@functools.cache
def _zero_step(mesh: Mesh) -> Callable[..., tuple[jax.Array, jax.Array, jax.Array]]:
    """Build, once per mesh, the compiled ZeRO step."""
    rows = P("data", None)
    return jax.jit(
        jax.shard_map(
            _local_step,
            mesh=mesh,
            in_specs=(P(), rows, rows, rows, rows, P(), P()),  # w, m, v, x, y, step, lr
            out_specs=(P(), rows, rows),  # w whole; m and v split by rows
        )
    )


def _check_inputs(
    w: object, m: object, v: object, x: object, y: object, step: object, lr: object
) -> tuple[Any, Any]:
    """Raise unless the arguments of the step fit together; return ``(step, lr)`` as numbers.

    A ``step`` or ``lr`` traced by a JAX transformation is returned as it is.

    Raises:
      TypeError: for a non-array, a dtype that is not floating-point, a ``step``
        that is not a whole number or an ``lr`` that is not a real number.
      ValueError: for a wrong rank, shapes that do not match, an empty batch or
        output, a ``step`` below 1, or an ``lr`` that is nan or infinite.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.zero_adam_step import _check_inputs
      >>> ones = jnp.ones((3, 2))
      >>> _check_inputs(ones, ones, ones, jnp.ones((4, 3)), jnp.ones((4, 2)), 2, 0.1)
      (2, 0.1)
      >>> _check_inputs(ones, jnp.ones((2, 3)), ones, jnp.ones((4, 3)), jnp.ones((4, 2)), 2, 0.1)
      Traceback (most recent call last):
      ...
      ValueError: m must have w's shape (D, F) = (3, 2), got (2, 3)
      >>> _check_inputs(ones, ones, ones, jnp.ones((4, 3)), jnp.ones((4, 2)), 0, 0.1)
      Traceback (most recent call last):
      ...
      ValueError: step must be a whole number >= 1, got 0
    """
    for value, name, layout in (
        (w, "w", "of shape (D, F)"),
        (m, "m", "of shape (D, F)"),
        (v, "v", "of shape (D, F)"),
        (x, "x", "of shape (N, D)"),
        (y, "y", "of shape (N, F)"),
    ):
        check_array(value, name, ndim=2, layout=layout)
        check_floating(value, name)  # type: ignore[arg-type]
    w_, m_, v_, x_, y_ = (np.shape(a) for a in (w, m, v, x, y))
    for name, shape in (("m", m_), ("v", v_)):
        if shape != w_:
            msg = f"{name} must have w's shape (D, F) = {w_}, got {shape}"
            raise ValueError(msg)
    if x_[1] != w_[0]:
        msg = f"x has {x_[1]} columns but w has {w_[0]} rows: x must be (N, D) and w (D, F)"
        raise ValueError(msg)
    if y_ != (x_[0], w_[1]):
        msg = f"y must have shape (N, F) = {(x_[0], w_[1])}, got {y_}"
        raise ValueError(msg)
    if x_[0] == 0:
        msg = (
            f"x and y must have at least one row, got x of shape {x_}: the mean squared "
            "error of an empty batch is not a number"
        )
        raise ValueError(msg)
    if w_[1] == 0:
        msg = (
            f"w must have at least one column (F >= 1), got w of shape {w_}: the mean "
            "squared error of no elements is not a number"
        )
        raise ValueError(msg)
    if isinstance(step, jax.core.Tracer):
        return step, require_finite_number(lr, "lr")
    number = step.item() if isinstance(step, jax.Array | np.ndarray) and step.shape == () else step
    if (
        isinstance(number, float | np.floating)
        and math.isfinite(number)
        and number != math.floor(number)
    ):  # the statement's TypeError: "a step that is not a whole number" (step counts)
        msg = f"step must be a whole number (an int), got {step!r}"
        raise TypeError(msg)
    return require_whole_number(step, "step", minimum=1), require_finite_number(lr, "lr")


def oracle(
    w: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    step: int,
    lr: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Adam step from the closed-form gradient, in NumPy at 64-bit precision.

    ``g = 2 / (N * F) * x.T @ (x @ w - y)``, then Adam's update.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.zero_adam_step import oracle
      >>> z = np.zeros((1, 1))
      >>> [a.round(6) for a in oracle(z, z, z, np.array([[1.0], [2.0]]), np.array([[2.0], [4.0]]), 1, 0.1)]
      [array([[0.1]]), array([[-1.]]), array([[0.1]])]
    """
    w, m, v, x, y = (precise(np.asarray(a)) for a in (w, m, v, x, y))
    g = 2.0 / (x.shape[0] * w.shape[1]) * (x.T @ (x @ w - y))
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g**2
    m_hat, v_hat = m / (1 - B1**step), v / (1 - B2**step)
    return w - lr * m_hat / (np.sqrt(v_hat) + EPS), m, v


def unsharded(
    w: jax.Array,
    m: jax.Array,
    v: jax.Array,
    x: jax.Array,
    y: jax.Array,
    step: int,
    lr: float,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The same step in plain ``jax.numpy`` on one device, with ``jax.grad``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.zero_adam_step import unsharded
      >>> z = jnp.zeros((1, 1))
      >>> unsharded(z, z, z, jnp.array([[1.0], [2.0]]), jnp.array([[2.0], [4.0]]), 1, 0.1)[1]
      Array([[-1.]], dtype=float32)
    """
    g = jax.grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return _adam_update(w, m, v, g, step, lr)


def _shared_devices(args: tuple[Any, ...], devices: int) -> int:
    """How many devices split both the batch and ``w``'s rows, out of ``devices``."""
    w, _, _, x, *_ = args
    return usable_device_count(math.gcd(np.shape(x)[0], np.shape(w)[0]), devices)


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as the contract says they arrive: ``w`` whole, the rest split by rows."""
    w, m, v, x, y, step, lr = args
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    rows = NamedSharding(mesh, P("data", None))
    return (place(w, NamedSharding(mesh, P())), *place((m, v, x, y), rows), step, lr)


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``data_mesh(math.gcd(N, D))``."""
    return (_shared_devices(args, devices),)


def _explain(
    case: Case,
    _expected: tuple[np.ndarray, ...],
    received: tuple[np.ndarray, ...],
) -> str | None:
    """Recognise the ZeRO step's classic mistakes in a wrong ``(w, m, v)``.

    - the gradient ``k`` times too large, ``k`` a device count that divides both
      ``N`` and ``D``: a ``psum_scatter`` of the gradient ``jax.grad`` of the
      replicated ``w`` had already summed (or each device's own mean loss);
    - no bias correction: ``m`` and ``v`` right, ``w`` moved by ``m / (sqrt(v) + eps)``.

    Examples:
      >>> from shard_tutorial.problems import get_problem
      >>> from shard_tutorial.problems.zero_adam_step import _explain, _with_gradient_scaled
      >>> case = get_problem("zero_adam_step").cases[1]
      >>> print(_explain(case, None, _with_gradient_scaled(case, 8)))
      m and v are those of a gradient 8 times too large, as on 8 devices when it is summed...
    """
    w, _, _, x, _, step, lr = case.args
    got = tuple(precise(np.asarray(r)) for r in received)
    if any(g.shape != np.shape(w) for g in got):
        return None

    def close(a: np.ndarray, c: np.ndarray) -> bool:
        return bool(np.allclose(a, c, rtol=1e-3, atol=1e-5 * (1 + np.abs(c).max(initial=0))))

    right = oracle(*case.args)
    for devices in device_counts(math.gcd(x.shape[0], np.shape(w)[0])):
        scaled = _with_gradient_scaled(case, devices)
        if close(scaled[1], right[1]):
            continue  # the gradient is 0: nothing to tell apart
        if all(close(g, s) for g, s in zip(got[1:], scaled[1:], strict=True)):
            return (
                f"m and v are those of a gradient {devices} times too large, as on {devices} "
                "devices when it is summed over them once more than it should be: jax.grad "
                "of the replicated w inside shard_map already sums the gradient over the "
                "devices (an all-reduce), and a psum_scatter of that sum adds up "
                f"{devices} copies of it; or the loss was each device's own mean, without "
                'the pmean over "data". Differentiate with respect to jax.lax.pcast(w, '
                '"data", to="varying") to get this device\'s own part, then psum_scatter it'
            )
    if close(got[1], right[1]) and close(got[2], right[2]):
        m_new, v_new = right[1], right[2]
        uncorrected = precise(w) - lr * m_new / (np.sqrt(v_new) + EPS)
        if close(got[0], uncorrected) and not close(uncorrected, right[0]):
            return (
                f"m and v are right, but w moved by lr * m / (sqrt(v) + eps), without Adam's "
                f"bias correction: at step {step} divide m by 1 - b1 ** step and v by "
                "1 - b2 ** step first"
            )
    if close(got[0], precise(w)) and not close(right[0], precise(w)):
        return "w did not move: was the updated w returned (all-gathered from the new rows)?"
    return None


def _with_gradient_scaled(case: Case, scale: int) -> tuple[np.ndarray, ...]:
    """The oracle's step from ``scale`` times the gradient."""
    w, m, v, x, y, step, lr = (precise(a) if isinstance(a, np.ndarray) else a for a in case.args)
    g = scale * 2.0 / (x.shape[0] * w.shape[1]) * (x.T @ (x @ w - y))
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g**2
    m_hat, v_hat = m / (1 - B1**step), v / (1 - B2**step)
    return w - lr * m_hat / (np.sqrt(v_hat) + EPS), m, v


def make_case(
    rng: np.random.Generator,
    label: str,
    batch: int,
    d: int,
    f: int,
    step: int = 3,
    lr: float = 0.01,
) -> Case:
    """A case: standard-normal data, ``y`` a noisy linear function of ``x``, moments not 0.

    ``m`` and ``v`` are what a few earlier steps could have left: ``m`` small and
    of either sign, ``v`` positive.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.zero_adam_step import make_case
      >>> case = make_case(np.random.default_rng(0), "small", 4, 3, 2)
      >>> [np.shape(a) for a in case.args]
      [(3, 2), (3, 2), (3, 2), (4, 3), (4, 2), (), ()]
    """
    w = rng.normal(size=(d, f)).astype(np.float32)
    m = rng.normal(scale=0.1, size=(d, f)).astype(np.float32)
    v = rng.uniform(0.01, 0.1, size=(d, f)).astype(np.float32)
    x = rng.normal(size=(batch, d)).astype(np.float32)
    y = (x @ rng.normal(size=(d, f)) + rng.normal(scale=0.1, size=(batch, f))).astype(np.float32)
    return Case(label, (w, m, v, x, y, int(step), float(lr)))


def _generate(rng: np.random.Generator) -> Case:
    """One random case: N and D multiples of a common device count from 1 to 8."""
    devices = int(rng.integers(1, 9))
    batch = devices * int(rng.integers(1, 5))
    d = devices * int(rng.integers(1, 4))
    f = int(rng.integers(1, 5))
    step = int(rng.integers(1, 50))
    lr = float(np.round(rng.uniform(0.001, 0.1), 3))
    return make_case(
        rng, f"random: N={batch}, D={d}, F={f}, step={step}, lr={lr}", batch, d, f, step, lr
    )


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261128)
    zeros = np.zeros((1, 1), np.float32)
    example = Case(
        "example from the problem statement: step 1 from zero moments",
        (zeros, zeros, zeros, np.array([[1.0], [2.0]], np.float32),
         np.array([[2.0], [4.0]], np.float32), 1, 0.1),
    )  # fmt: skip
    return [
        example,
        make_case(rng, "N=16, D=16: 2 rows of m and v on each of 8 devices", 16, 16, 2, step=5),
        make_case(rng, "step 1: the bias correction divides by 0.1 and 0.001", 8, 8, 3, step=1),
        make_case(rng, "step 1000: the bias correction nearly 1", 8, 8, 2, step=1000, lr=0.05),
        make_case(rng, "N=12, D=6: split over 6 of 8 devices", 12, 6, 2, step=2),
        make_case(rng, "N=8, D=12: 4 devices divide both", 8, 12, 2, step=7),
        make_case(rng, "N=7, D=4: N prime, one device", 7, 4, 2, step=3),
        make_case(rng, "lr=0: w does not move, m and v do", 8, 8, 2, step=4, lr=0.0),
        make_case(rng, "N=64, D=32, F=4: 4 rows of m and v per device", 64, 32, 4, step=10),
    ]


def _lr_unused(args: tuple[Any, ...]) -> str | None:
    """Why a case with ``lr=0`` cannot show the all-gather of the new ``w``.

    Examples:
      >>> from shard_tutorial.problems.zero_adam_step import _lr_unused
      >>> _lr_unused((None,) * 6 + (0.1,)) is None
      True
      >>> print(_lr_unused((None,) * 6 + (0.0,)))
      lr=0: the new w is the old one, so a right answer's program need not gather it (XLA folds w - 0 * update away when lr is a constant)
    """
    if float(args[6]) != 0.0:
        return None
    return (
        "lr=0: the new w is the old one, so a right answer's program need not gather it "
        "(XLA folds w - 0 * update away when lr is a constant)"
    )


TECHNIQUE = Technique(
    collectives=(("reduce-scatter",), ("all-gather",)),
    forbidden=(
        Forbidden(
            "all-reduce",
            "the gradient must be reduce-scattered, each device receiving the rows whose "
            "moments it keeps, not all-reduced whole as in data parallelism",
            at_least=lambda args: int(np.size(args[0])) * np.asarray(args[0]).dtype.itemsize,
        ),
    ),
    hidden=_lr_unused,
    stays=Stays(
        (1, 2),
        "m or v (Adam's moments)",
        (
            "the optimizer state stays split over 'data': the gradient is reduce-scattered "
            "to the rows whose moments a device keeps, Adam updates those rows, and the new "
            "rows of w are all-gathered"
        ),
    ),
)
"""What a solution must do besides computing the right values."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """What a device may send: a reduce-scatter of the gradient, an all-gather of ``w``.

    Each is ``(n - 1) / n`` of ``w``'s bytes per device (the ring's figure, see
    :func:`shard_tutorial.collective_costs.ring_bytes`), together what one all-reduce of
    ``w`` sends; and an all-reduce of one number, the ``pmean`` of the loss,
    which a jitted step leaves out (``jax.grad`` does not use the loss's value)
    but an eager ``shard_map`` runs. Gathering the moments whole, or the
    gradient, sends more.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.zero_adam_step import _limits
      >>> ones = np.ones((16, 2), np.float32)
      >>> args = (ones, ones, ones, np.ones((32, 16), np.float32), np.ones((32, 2), np.float32), 1, 0.1)
      >>> n = min(jax.device_count(), 8)
      >>> _limits(args) == {"sent": 2 * (n - 1) / n * (16 * 2 + 1) * 4}
      True
    """
    n = _shared_devices(args, jax.device_count())  # on one device: 0, nothing sent
    item = max(np.dtype(a.dtype).itemsize for a in args[:5])
    return {"sent": 2 * (n - 1) / n * (int(np.size(args[0])) + LOSS_NUMBERS) * item}


LOSS_NUMBERS = 1
"""The numbers of the loss's ``pmean`` the budget allows besides ``w``'s (an eager call runs it)."""


BUDGET = Budget(
    _limits,
    "ZeRO sends a reduce-scatter of the gradient and an all-gather of the new w, each "
    "(n - 1) / n of w's bytes from each device, what one all-reduce of the gradient "
    "sends (and the loss's pmean, one number); gathering the moments or the gradient "
    "whole sends more",
)
"""What a solution may send per device."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    w = m = v = np.ones((2, 1), np.float32)
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    ints, wide = x.astype(np.int32), np.ones((2, 2), np.float32)
    return [
        Case("w a list, not an array", (w.tolist(), m, v, x, y, 3, 0.1), raises="TypeError"),
        Case("int32 x: not floating-point", (w, m, v, ints, y, 3, 0.1), raises="TypeError"),
        Case("step a string ('3')", (w, m, v, x, y, "3", 0.1), raises="TypeError"),
        Case("a fractional step (2.5)", (w, m, v, x, y, 2.5, 0.1), raises="TypeError"),
        Case("lr a string ('0.1')", (w, m, v, x, y, 3, "0.1"), raises="TypeError"),
        Case("m of shape (2, 2), w of (2, 1)", (w, wide, v, x, y, 3, 0.1), raises="ValueError"),
        Case("an empty batch", (w, m, v, x[:0], y[:0], 3, 0.1), raises="ValueError"),
        Case(
            "no outputs (F = 0)",
            (w[:, :0], m[:, :0], v[:, :0], x, y[:, :0], 3, 0.1),
            raises="ValueError",
        ),
        Case("step 0", (w, m, v, x, y, 0, 0.1), raises="ValueError"),
        Case("lr nan", (w, m, v, x, y, 3, float("nan")), raises="ValueError"),
        Case("lr infinite", (w, m, v, x, y, 3, float("inf")), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="zero_adam_step",
    title="ZeRO Adam step",
    reference=zero_adam_step,
    oracle=oracle,
    make_cases=_cases,
    unsharded=unsharded,
    rtol=1e-5,
    atol=1e-5,  # float32 sums of up to 64 rows, in another order than NumPy's
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
        Placement(axis=None),
        Placement(axis=0, blocks=_shared_devices, spec='P("data", None)'),
        Placement(axis=0, blocks=_shared_devices, spec='P("data", None)'),
    ),
    make_refusals=_refusals,
    folder="scale",
    outputs=("w", "m", "v"),
    arrange=_arrange,
    budget=BUDGET,
)
