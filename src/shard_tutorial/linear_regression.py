"""The model the training problems share: linear regression, one SGD step on its mean squared error.

A public module, so a reader's copy of a reference solution can import its
argument check: ``from shard_tutorial.linear_regression import check_step_inputs``.

``pred = x @ w + b`` and ``loss = mean((pred - y) ** 2)`` over every element of
the whole batch, with ``x`` (B, d_in), ``y`` (B, d_out), ``w`` (d_in, d_out), ``b``
(d_out,). One SGD step returns ``(w - lr * dL/dw, b - lr * dL/db)``. This module
holds what the data-parallel and the fully-sharded problems share: the argument
checks, the closed-form NumPy oracle, the plain-jnp twin, the case builder and the
recognisers of the classic mistakes (a step scaled by the device count, a step
from one device's block only), so the two problems cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from shard_tutorial.meshes import device_counts
from shard_tutorial.problem import Case, precise
from shard_tutorial.validation import check_array, check_floating, require_finite_number

__all__ = [
    "REPLICATED_GRADIENTS_SUMMED",
    "check_step_inputs",
    "explain_step",
    "gradient_unused",
    "make_case",
    "oracle_step",
    "step_refusals",
    "unsharded_step",
]


def check_step_inputs(w: object, b: object, x: object, y: object, lr: object) -> float | jax.Array:
    """Raise unless the arguments of an SGD step fit together; return ``lr`` as a float.

    Raises:
      TypeError: for a non-array, a dtype that is not floating-point, or an ``lr``
        that is not a real number.
      ValueError: for a wrong rank, shapes that do not match, an empty batch or
        output, or an ``lr`` that is nan or infinite.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.linear_regression import check_step_inputs
      >>> check_step_inputs(jnp.ones((3, 2)), jnp.ones(2), jnp.ones((4, 3)), jnp.ones((4, 2)), 0.1)
      0.1
      >>> check_step_inputs(jnp.ones((3, 2)), jnp.ones(2), jnp.ones((4, 5)), jnp.ones((4, 2)), 0.1)
      Traceback (most recent call last):
      ...
      ValueError: x has 5 columns but w has 3 rows: x must be (B, d_in) and w (d_in, d_out)
    """
    for value, name, ndim, layout in (
        (w, "w", 2, "of shape (d_in, d_out)"),
        (b, "b", 1, "of shape (d_out,)"),
        (x, "x", 2, "of shape (B, d_in)"),
        (y, "y", 2, "of shape (B, d_out)"),
    ):
        check_array(value, name, ndim=ndim, layout=layout)
        check_floating(value, name)  # type: ignore[arg-type]
    w_, b_, x_, y_ = (np.shape(v) for v in (w, b, x, y))
    if x_[1] != w_[0]:
        msg = (
            f"x has {x_[1]} columns but w has {w_[0]} rows: x must be (B, d_in) and w (d_in, d_out)"
        )
        raise ValueError(msg)
    if b_[0] != w_[1]:
        msg = f"b has {b_[0]} elements but w has {w_[1]} columns: b must be (d_out,)"
        raise ValueError(msg)
    if y_ != (x_[0], w_[1]):
        msg = f"y must have shape (B, d_out) = {(x_[0], w_[1])}, got {y_}"
        raise ValueError(msg)
    if x_[0] == 0:
        msg = (
            f"x and y must have at least one row, got x of shape {x_}: the mean squared "
            "error of an empty batch is not a number"
        )
        raise ValueError(msg)
    if w_[1] == 0:
        msg = (
            f"w and b must have at least one output (d_out >= 1), got w of shape {w_}: the "
            "mean squared error of no elements is not a number"
        )
        raise ValueError(msg)
    return require_finite_number(lr, "lr")


def gradient_unused(lr: object) -> str | None:
    """Why a step with this learning rate cannot show how its gradient was computed.

    With ``lr=0`` the new parameters are the old ones whatever the gradient is, so
    the program of a right answer may leave out the gradient and its collectives:
    XLA folds ``w - 0 * grad`` to ``w`` when ``lr`` is a constant of the program (a
    Python float closed over), and keeps it when ``lr`` is an argument. A right
    answer cannot depend on how the reader passes a scalar, so such a case is not
    asked for the technique (:attr:`shard_tutorial.problem.Technique.hidden`).

    Args:
      lr: a case's learning rate.

    Returns:
      The reason, or None when ``lr`` is not 0.

    Examples:
      >>> from shard_tutorial.linear_regression import gradient_unused
      >>> gradient_unused(0.1) is None
      True
      >>> print(gradient_unused(0.0))
      lr=0: the step leaves the parameters as they are, so a right answer's program need not compute the gradient (XLA folds 0 * grad away when lr is a constant)
    """
    if float(lr) != 0.0:  # type: ignore[arg-type]
        return None
    return (
        "lr=0: the step leaves the parameters as they are, so a right answer's program need "
        "not compute the gradient (XLA folds 0 * grad away when lr is a constant)"
    )


def oracle_step(
    w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float
) -> tuple[np.ndarray, np.ndarray]:
    """The SGD step from the closed-form gradient, in NumPy at 64-bit precision.

    ``r = x @ w + b - y``; ``dL/dw = 2 / (B * d_out) * x.T @ r``; ``dL/db =
    2 / (B * d_out) * r.sum(0)``.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.linear_regression import oracle_step
      >>> w, b = np.zeros((1, 1)), np.zeros(1)
      >>> oracle_step(w, b, np.array([[1.0], [2.0]]), np.array([[2.0], [4.0]]), 0.1)
      (array([[1.]]), array([0.6]))
    """
    w, b, x, y = (precise(np.asarray(a)) for a in (w, b, x, y))
    r = x @ w + b - y
    scale = 2.0 / (x.shape[0] * w.shape[1])
    return w - lr * scale * (x.T @ r), b - lr * scale * r.sum(0)


def unsharded_step(
    w: jax.Array, b: jax.Array, x: jax.Array, y: jax.Array, lr: float
) -> tuple[jax.Array, jax.Array]:
    """The same step in plain ``jax.numpy`` on one device, with ``jax.grad``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.linear_regression import unsharded_step
      >>> unsharded_step(jnp.zeros((1, 1)), jnp.zeros(1), jnp.array([[1.0], [2.0]]),
      ...                jnp.array([[2.0], [4.0]]), 0.1)
      (Array([[1.]], dtype=float32), Array([0.6], dtype=float32))
    """

    def loss(w: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.mean((x @ w + b - y) ** 2)

    dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
    return w - lr * dw, b - lr * db


def make_case(
    rng: np.random.Generator, label: str, batch: int, d_in: int, d_out: int, lr: float = 0.1
) -> Case:
    """A case of the step: standard-normal float32 data, ``y`` a noisy linear function of ``x``.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.linear_regression import make_case
      >>> case = make_case(np.random.default_rng(0), "small", 4, 3, 2)
      >>> [np.shape(a) for a in case.args]
      [(3, 2), (2,), (4, 3), (4, 2), ()]
    """
    w = rng.normal(size=(d_in, d_out)).astype(np.float32)
    b = rng.normal(size=(d_out,)).astype(np.float32)
    x = rng.normal(size=(batch, d_in)).astype(np.float32)
    true_w = rng.normal(size=(d_in, d_out))
    y = (x @ true_w + rng.normal(scale=0.1, size=(batch, d_out))).astype(np.float32)
    return Case(label, (w, b, x, y, float(lr)))


def _scales(batch: int) -> Iterator[tuple[int, int]]:
    """(scale, devices) for the wrong step sizes a device count gives: d, then d squared.

    Every d first: a step 4 times too long is one sum too many on 4 devices before it
    is two on 2 (the sentence for d names both ways of summing once too often).
    """
    counts = list(device_counts(batch))
    yield from ((devices, devices) for devices in counts)
    yield from ((devices * devices, devices) for devices in counts)


REPLICATED_GRADIENTS_SUMMED = (
    "JAX already sums the gradient of a replicated parameter over the devices (the "
    "transpose of its implicit broadcast)"
)
"""The d-times explanation's account of how JAX sums the gradients (data parallelism)."""


def explain_step(
    case: Case,
    _expected: tuple[np.ndarray, np.ndarray],
    received: tuple[np.ndarray, np.ndarray],
    *,
    already_summed: str = REPLICATED_GRADIENTS_SUMMED,
) -> str | None:
    """Recognise the classic data-parallel mistakes in a wrong ``(w, b)``.

    - the step is ``d`` or ``d * d`` times the right one, ``d`` a device count that
      divides the batch: gradients summed once or twice too often;
    - the step is the one a single device takes from its own block of the batch.

    ``already_summed`` is the clause of the ``d``-times sentence that says how JAX
    sums the gradients over the devices: a problem whose parameters are laid out
    otherwise (fully sharded) words it for its own layout.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.linear_regression import explain_step, make_case, oracle_step
      >>> case = make_case(np.random.default_rng(0), "B=16", 16, 3, 2)
      >>> w, b, *_ = case.args
      >>> right_w, right_b = oracle_step(*case.args)
      >>> eight = (w + 8 * (right_w - w), b + 8 * (right_b - b))
      >>> print(explain_step(case, (right_w, right_b), eight))
      The step is 8 times the right one, as on 8 devices when the gradient is summed over them...
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

    if not (close(step_w, 0 * step_w) and close(step_b, 0 * step_b)):
        for scale, devices in _scales(x.shape[0]):
            if close(moved_w, scale * step_w) and close(moved_b, scale * step_b):
                if scale == devices:
                    return (
                        f"The step is {scale} times the right one, as on {devices} devices "
                        "when the gradient is summed over them once more than it should be. "
                        f"{already_summed}, so either the loss "
                        f"was each device's own mean ({devices} gradients of the whole "
                        "batch's size, added up; a pmean of them changes nothing), or a psum "
                        "was added to gradients JAX had already summed. Take the loss's "
                        'jax.lax.pmean over "data" and its gradient as it is'
                    )
                return (
                    f"The step is {scale} times the right one, {devices} x {devices} on "
                    f"{devices} devices: each device's own mean loss (whose gradient JAX "
                    f"already sums, {devices}x) and then a psum of the gradients "
                    f'({devices}x again). Take the loss\'s jax.lax.pmean over "data" and '
                    "its gradient as it is"
                )
        for devices in device_counts(x.shape[0]):
            rows = x.shape[0] // devices
            alone_w, alone_b = oracle_step(w, b, x[:rows], y[:rows], lr)
            if close(got_w, alone_w) and close(got_b, alone_b):
                plural = "s" if rows > 1 else ""
                return (
                    f"These are the parameters one device of {devices} computed from its own "
                    f"block of {rows} row{plural} only: each device took its own step, and the "
                    "devices now disagree (what check_vma=False lets through: JAX then neither "
                    "sums the gradient of a replicated parameter over the devices nor checks "
                    "that out_specs=P() holds). The gradient must cover the whole batch: keep "
                    'check_vma=True (the default) and take the jax.lax.pmean of the loss over "data"'
                )
    if close(moved_w, 0 * moved_w) and close(moved_b, 0 * moved_b):
        return "The parameters did not move: was the update w - lr * dw returned?"
    return None


def step_refusals() -> list[Case]:
    """The inputs an SGD step's statement refuses: one per clause of its "Raises" section.

    Examples:
      >>> [c.raises for c in step_refusals()].count("ValueError")
      5
    """
    w, b = np.ones((2, 1), np.float32), np.ones(1, np.float32)
    x, y = np.ones((4, 2), np.float32), np.ones((4, 1), np.float32)
    return [
        Case("w a list, not an array", (w.tolist(), b, x, y, 0.1), raises="TypeError"),
        Case("int32 x: not floating-point", (w, b, x.astype(np.int32), y, 0.1), raises="TypeError"),
        Case("lr a string ('0.1')", (w, b, x, y, "0.1"), raises="TypeError"),
        Case("x of 4 rows, y of 3", (w, b, x, y[:3], 0.1), raises="ValueError"),
        Case("an empty batch", (w, b, x[:0], y[:0], 0.1), raises="ValueError"),
        Case("no outputs (d_out = 0)", (w[:, :0], b[:0], x, y[:, :0], 0.1), raises="ValueError"),
        Case("lr nan", (w, b, x, y, float("nan")), raises="ValueError"),
        Case("lr infinite", (w, b, x, y, float("inf")), raises="ValueError"),
    ]
