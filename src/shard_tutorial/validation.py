"""Argument checks shared by the reference implementations, public so solutions can use them.

Each check runs before any JAX work and raises an error that names the argument,
shows the value received and says what was expected, so that a wrong call fails
on the caller's line instead of deep inside XLA. A reader who copies a reference
solution into their own file imports them from here:
``from shard_tutorial.validation import check_array``.
"""

from __future__ import annotations

import numbers
import operator

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "check_array",
    "check_attention_inputs",
    "check_floating",
    "check_moe_shapes",
    "require_count",
    "require_finite_number",
    "require_whole_number",
]


def check_array(value: object, name: str, *, ndim: int, layout: str) -> None:
    """Raise unless ``value`` is a numeric array of rank ``ndim``.

    Numeric means every dtype JAX counts as a number (``jnp.issubdtype(dtype,
    jnp.number)``): integers, floats including ``bfloat16``, ``float16`` and the
    ``float8`` types, and complex numbers; not ``bool``. A Python number or list
    is refused: the problems take arrays, and ``jnp.asarray`` says which dtype.

    Args:
      value: what the caller passed.
      name: the parameter's name, used in the message.
      ndim: the rank the parameter must have.
      layout: the expected shape, e.g. ``"of shape (B, d)"``.

    Raises:
      TypeError: for a non-array or a non-numeric dtype (bool, str, object).
      ValueError: for the wrong rank.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.validation import check_array
      >>> check_array(jnp.ones(3, jnp.bfloat16), "x", ndim=1, layout="of shape (n,)")
      >>> check_array(jnp.ones(3, bool), "x", ndim=1, layout="of shape (n,)")
      Traceback (most recent call last):
      ...
      TypeError: x must hold numbers (integer, floating or complex), got dtype bool
      >>> check_array(3.0, "x", ndim=1, layout="of shape (n,)")
      Traceback (most recent call last):
      ...
      TypeError: x must be a 1-D array of shape (n,) (a jax.Array or numpy.ndarray), got float: 3.0; convert it with jnp.asarray(x)
    """
    if not isinstance(value, jax.Array | np.ndarray):
        msg = (
            f"{name} must be a {ndim}-D array {layout} (a jax.Array or numpy.ndarray), "
            f"got {type(value).__name__}: {_short_repr(value)}; convert it with jnp.asarray({name})"
        )
        raise TypeError(msg)
    if value.ndim != ndim:
        msg = f"{name} must be a {ndim}-D array {layout}, got a {value.ndim}-D array of shape {value.shape}"
        raise ValueError(msg)
    if not jnp.issubdtype(value.dtype, jnp.number):
        msg = f"{name} must hold numbers (integer, floating or complex), got dtype {value.dtype}"
        raise TypeError(msg)


def check_attention_inputs(
    q: object, k: object, v: object, causal: object, *, layout: str, sizes: str
) -> None:
    """Raise unless ``q``, ``k`` and ``v`` are one shape and dtype of floats, ``causal`` a bool.

    The checks of the attention problems (ring attention's ``(T, D)``, Ulysses'
    ``(T, H, K)``): each array of the rank ``layout`` names, floating-point; ``k``
    and ``v`` of ``q``'s shape and dtype; no size 0; ``causal`` a Python or NumPy
    bool (under ``jax.jit`` it must be static).

    Args:
      q: the queries.
      k: the keys.
      v: the values.
      causal: whether the mask is causal.
      layout: the shape in words, e.g. ``"(T, H, K)"``: its names count the rank.
      sizes: what a size of 0 leaves out, e.g. ``"one token, one head and one column"``.

    Raises:
      TypeError: for a non-array, a dtype that is not floating point, arrays of
        different dtypes, or a ``causal`` that is not a bool.
      ValueError: for a wrong rank, shapes that differ, or a size of 0.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.validation import check_attention_inputs
      >>> q = np.ones((4, 2), np.float32)
      >>> check_attention_inputs(q, q, q, False, layout="(T, D)", sizes="one row and one column")
      >>> check_attention_inputs(q, q[:3], q, False, layout="(T, D)", sizes="one row")
      Traceback (most recent call last):
      ...
      ValueError: k has shape (3, 2) but q has shape (4, 2): all are (T, D)
    """
    ndim = layout.count(",") + 1
    for name, array in (("q", q), ("k", k), ("v", v)):
        check_array(array, name, ndim=ndim, layout=f"of shape {layout}")
        dtype = array.dtype  # type: ignore[attr-defined]
        if not jnp.issubdtype(dtype, jnp.floating):
            msg = f"{name} must hold floating-point numbers, got dtype {dtype}"
            raise TypeError(msg)
    shape, dtype = np.shape(q), q.dtype  # type: ignore[attr-defined]
    for name, array in (("k", k), ("v", v)):
        if np.shape(array) != shape:
            msg = f"{name} has shape {np.shape(array)} but q has shape {shape}: all are {layout}"
            raise ValueError(msg)
        if array.dtype != dtype:  # type: ignore[attr-defined]
            msg = f"{name} has dtype {array.dtype} but q has dtype {dtype}: use one dtype"  # type: ignore[attr-defined]
            raise TypeError(msg)
    if 0 in shape:
        msg = f"q, k and v must have at least {sizes}, got shape {shape}"
        raise ValueError(msg)
    if not isinstance(causal, bool | np.bool_):
        msg = f"causal must be True or False, got {type(causal).__name__}: {causal!r}" + (
            " (under jax.jit, pass it in static_argnames='causal')"
            if isinstance(causal, jax.core.Tracer)
            else ""
        )
        raise TypeError(msg)


def check_moe_shapes(x: object, router_logits: object, w: object) -> tuple[int, int, int, int]:
    """Raise unless a mixture of experts' three arrays fit together; return T, D, E and F.

    The shape checks both expert problems share (their dtype and size rules differ):
    ``x`` (T, D), ``router_logits`` (T, E) and ``w`` (E, D, F), already checked to be
    arrays of ranks 2, 2 and 3 (:func:`check_array`).

    Raises:
      ValueError: for a ``router_logits`` whose rows are not ``x``'s, a ``w`` whose
        experts are not the logits', or a ``w`` whose inputs are not ``x``'s features.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.validation import check_moe_shapes
      >>> check_moe_shapes(np.ones((6, 2)), np.ones((6, 4)), np.ones((4, 2, 3)))
      (6, 2, 4, 3)
      >>> check_moe_shapes(np.ones((6, 2)), np.ones((5, 4)), np.ones((4, 2, 3)))
      Traceback (most recent call last):
      ...
      ValueError: router_logits has 5 rows but x has 6: one row of logits per token, x of shape (T, D) and router_logits (T, E)
    """
    (tokens, d), (tokens_r, experts), (experts_w, d_w, f) = (
        np.shape(x),
        np.shape(router_logits),
        np.shape(w),
    )
    if tokens_r != tokens:
        msg = (
            f"router_logits has {tokens_r} rows but x has {tokens}: one row of logits per "
            "token, x of shape (T, D) and router_logits (T, E)"
        )
        raise ValueError(msg)
    if experts_w != experts:
        msg = (
            f"w holds {experts_w} experts but router_logits scores {experts}: "
            "router_logits must be (T, E) and w (E, D, F)"
        )
        raise ValueError(msg)
    if d_w != d:
        msg = f"w's experts take {d_w} features but x has {d}: x must be (T, D) and w (E, D, F)"
        raise ValueError(msg)
    return tokens, d, experts, f


def require_whole_number(value: object, name: str, *, minimum: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is a whole number (``3`` or ``3.0``), else raise.

    The problems accept counts and seeds as floats, as their statements say, but
    a fractional value is rejected rather than truncated.

    Args:
      value: what the caller passed: a Python or NumPy number, or a 0-d array.
      name: the parameter's name, used in the message.
      minimum: the smallest allowed value, if any.

    Returns:
      The value as a Python ``int``.

    Raises:
      TypeError: for a bool, a non-number or an array with more than one element.
      ValueError: for a fractional or non-finite value, or one below ``minimum``.
    """
    expected = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
    number = value
    if isinstance(value, jax.core.Tracer):
        msg = (
            f"{name} must be a concrete number, but here it is traced by a JAX transformation "
            "(jax.jit, jax.vmap...): it sets shapes or parameters, so pass it as a Python "
            f"number, e.g. jax.jit(f, static_argnames={name!r})"
        )
        raise TypeError(msg)
    if isinstance(value, jax.Array | np.ndarray) and value.shape == ():
        number = value.item()
    if isinstance(number, bool | np.bool_) or not isinstance(number, numbers.Real):
        msg = f"{name} must be {expected}, got {type(value).__name__}: {_short_repr(value)}"
        raise TypeError(msg)
    if isinstance(number, numbers.Integral):
        whole = int(number)
    else:
        real = float(number)
        if not real.is_integer():  # also rejects nan and inf
            msg = f"{name} must be {expected}, got {number!r}"
            raise ValueError(msg)
        whole = int(real)
    if minimum is not None and whole < minimum:
        msg = f"{name} must be {expected}, got {number!r}"
        raise ValueError(msg)
    return whole


def require_count(value: object, name: str, *, unit: str = "") -> int:
    """Return ``value`` if it is an integer of at least 1 (a count of devices, of processes).

    Unlike :func:`require_whole_number`, ``2.0`` is refused: a count is an
    integer, and a float usually means a computation went wrong upstream.

    Args:
      value: what the caller passed.
      name: the parameter's name, used in the message.
      unit: what is counted, said after "an integer", e.g. ``" number of devices"``.

    Returns:
      The value as a Python ``int``.

    Raises:
      TypeError: for a bool or anything that is not an integer.
      ValueError: for a value below 1.

    Examples:
      >>> from shard_tutorial.validation import require_count
      >>> require_count(8, "count")
      8
      >>> require_count(2.0, "processes")
      Traceback (most recent call last):
      ...
      TypeError: processes must be an integer, got float 2.0
      >>> require_count(0, "count", unit=" number of devices")
      Traceback (most recent call last):
      ...
      ValueError: count must be at least 1, got 0
    """
    if isinstance(value, bool):
        msg = f"{name} must be an integer{unit}, got {value!r}"
        raise TypeError(msg)
    try:
        count = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        msg = f"{name} must be an integer{unit}, got {type(value).__name__} {value!r}"
        raise TypeError(msg) from None
    if count < 1:
        msg = f"{name} must be at least 1, got {count}"
        raise ValueError(msg)
    return count


def check_floating(value: jax.Array | np.ndarray, name: str) -> None:
    """Raise unless ``value`` holds floating-point numbers (``bfloat16`` and ``float16`` too).

    Gradients exist only for floating-point inputs, so a training step refuses
    integers and complex numbers with a message that names the argument.

    Args:
      value: an array that :func:`check_array` accepted.
      name: the parameter's name, used in the message.

    Raises:
      TypeError: for any other dtype.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.validation import check_floating
      >>> check_floating(jnp.ones(2, jnp.bfloat16), "w")
      >>> check_floating(jnp.arange(2), "w")
      Traceback (most recent call last):
      ...
      TypeError: w must hold floating-point numbers, got dtype int32; use w.astype(jnp.float32)
    """
    if not jnp.issubdtype(value.dtype, jnp.floating):
        msg = (
            f"{name} must hold floating-point numbers, got dtype {value.dtype}; "
            f"use {name}.astype(jnp.float32)"
        )
        raise TypeError(msg)


def require_finite_number(value: object, name: str) -> float | jax.Array:
    """Return ``value`` as a ``float`` if it is a finite real number, else raise.

    A learning rate, for example: a Python or NumPy number, or a 0-d array. A
    value traced by ``jax.jit`` or ``jax.grad`` cannot be looked at, and is
    returned as it is.

    Args:
      value: what the caller passed.
      name: the parameter's name, used in the message.

    Returns:
      The value as a Python ``float`` (or the tracer, unchanged).

    Raises:
      TypeError: for a bool, a non-number or an array with more than one element.
      ValueError: for nan or an infinity.

    Examples:
      >>> from shard_tutorial.validation import require_finite_number
      >>> require_finite_number(1, "lr")
      1.0
      >>> require_finite_number(float("nan"), "lr")
      Traceback (most recent call last):
      ...
      ValueError: lr must be a finite number, got nan
      >>> require_finite_number("0.1", "lr")
      Traceback (most recent call last):
      ...
      TypeError: lr must be a real number (a Python float), got str: '0.1'
    """
    if isinstance(value, jax.core.Tracer):
        return value
    number = value
    if isinstance(value, jax.Array | np.ndarray) and value.shape == ():
        number = value.item()
    if isinstance(number, bool | np.bool_) or not isinstance(number, numbers.Real):
        msg = (
            f"{name} must be a real number (a Python float), got {type(value).__name__}: "
            f"{_short_repr(value)}"
        )
        raise TypeError(msg)
    real = float(number)
    if not np.isfinite(real):
        msg = f"{name} must be a finite number, got {real!r}"
        raise ValueError(msg)
    return real


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
