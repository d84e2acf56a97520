"""What a traced program's outputs depend on: its live operations and inputs.

The judge asks of an answer not only which collectives its program contains but
whether their results reach the answer. XLA removes what nothing uses from the
program it compiles, but not ``0 * x`` for floating-point ``x`` (``0 * inf`` is
NaN, so the product is not zero for every ``x``): a collective whose result is
multiplied by zero, and added to an answer computed another way, stays in the
compiled program, runs and moves its bytes. This module walks the program JAX
traced (its jaxpr) back from the outputs, the way data flows, and stops at a
product with a constant zero. It is a teaching aid's check for the usual shortcut,
not a proof: a zero computed at run time (``x - x``) is not recognised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

# Operations whose result is zero wherever their one array operand is: changes of shape
# or type, and shard_map's marks of a value as varying over mesh axes (pvary; pbroadcast
# on older JAX), which a literal zero inside shard_map gets.
_KEEPS_ZERO = frozenset(
    {
        "broadcast_in_dim",
        "convert_element_type",
        "copy",
        "copy_p",
        "expand_dims",
        "pbroadcast",
        "pvary",
        "reshape",
        "squeeze",
        "transpose",
    }
)


# Operations that call a nested program once, its inputs and outputs theirs: followed
# inside. Loops (scan, while) are not: what a loop's output depends on is a fixed point
# over its iterations, so they are taken whole, as conditionals are.
_CALLS = frozenset(
    {
        "checkpoint",
        "closed_call",
        "core_call",
        "custom_jvp_call",
        "custom_vjp_call",
        "custom_vjp_call_jaxpr",
        "jit",
        "named_call",
        "pjit",
        "remat",
        "remat2",
        "shard_map",
    }
)


@dataclasses.dataclass(frozen=True)
class Flow:
    """What reaches a traced program's outputs.

    Attributes:
      primitives: the names of the operations whose results reach an output,
        nested programs (``shard_map``, ``jit``, ...) included.
      inputs: for each input of the program, whether an output depends on it.
    """

    primitives: frozenset[str]
    inputs: tuple[bool, ...]


def flow(jaxpr: Any) -> Flow:
    """The operations and inputs that the outputs of ``jaxpr`` depend on.

    Args:
      jaxpr: a traced program: a ``jax.core.ClosedJaxpr`` (as ``jax.make_jaxpr``
        returns) or a ``Jaxpr``.

    Returns:
      A :class:`Flow`. A product with a constant zero is a constant: it depends on
      neither factor;
      a nested program (``shard_map``, ``jit``, custom derivatives, ``checkpoint``)
      is followed inside; loops and conditionals are taken whole.

    Raises:
      TypeError: ``jaxpr`` is not a traced program.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> def answer(x, y):
      ...     return jnp.sin(x) + 0 * jnp.cos(y)
      >>> found = flow(jax.make_jaxpr(answer)(1.0, 2.0))
      >>> sorted(found.primitives), found.inputs
      (['add', 'sin'], (True, False))
      >>> flow(jax.make_jaxpr(lambda x, y: x * y)(1.0, 2.0)).inputs
      (True, True)
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    if not hasattr(inner, "eqns") or not hasattr(inner, "outvars"):
        msg = (
            f"jaxpr must be a traced program (a ClosedJaxpr or a Jaxpr), got {type(jaxpr).__name__}"
        )
        raise TypeError(msg)
    zeros = _constant_zeros(jaxpr)
    found: set[str] = set()
    inputs = _walk(inner, [True] * len(inner.outvars), found, zeros)
    return Flow(frozenset(found), tuple(inputs))


def _is_var(value: Any) -> bool:
    return hasattr(value, "aval") and not hasattr(value, "val")  # a Literal has .val


def _is_zero(value: Any, zeros: set[Any]) -> bool:
    if hasattr(value, "val"):  # a Literal: a constant written into the program
        try:
            return bool(np.all(np.asarray(value.val) == 0))
        except (TypeError, ValueError):
            return False
    return value in zeros


def _constant_zeros(jaxpr: Any) -> set[Any]:
    """The variables of a closed program's top level bound to constant zero arrays."""
    zeros: set[Any] = set()
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for var, const in zip(
        getattr(inner, "constvars", ()), getattr(jaxpr, "consts", ()) or (), strict=False
    ):
        try:
            if np.size(const) <= 1 << 16 and bool(np.all(np.asarray(const) == 0)):
                zeros.add(var)
        except (TypeError, ValueError):
            continue
    return zeros


def _forward_zeros(jaxpr: Any, zeros: set[Any]) -> set[Any]:
    """``zeros`` and the variables computed from them that are zero too."""
    zeros = set(zeros)
    for equation in jaxpr.eqns:
        name = equation.primitive.name
        operands = [v for v in equation.invars if _is_var(v) or hasattr(v, "val")]
        if (name in _KEEPS_ZERO and operands and _is_zero(operands[0], zeros)) or (
            name == "mul" and any(_is_zero(v, zeros) for v in equation.invars)
        ):
            zeros.update(v for v in equation.outvars if _is_var(v))
    return zeros


def _nested_one_to_one(equation: Any) -> Any | None:
    """The program a call (:data:`_CALLS`) runs, if its inputs and outputs are the call's."""
    if equation.primitive.name not in _CALLS:
        return None
    candidates: list[Any] = []
    for value in equation.params.values():
        for item in value if isinstance(value, list | tuple) else (value,):
            nested = getattr(item, "jaxpr", item)
            if hasattr(nested, "eqns") and hasattr(nested, "invars"):
                candidates.append(item)
    if len(candidates) != 1:
        return None
    program: Any = getattr(candidates[0], "jaxpr", candidates[0])
    if len(program.invars) != len(equation.invars):
        return None
    if len(program.outvars) != len(equation.outvars):
        return None
    return candidates[0]


def _all_primitives(equation: Any, found: set[str]) -> None:
    """Every operation of ``equation``'s nested programs, for one taken whole."""
    pending = [equation]
    while pending:
        current = pending.pop()
        found.add(current.primitive.name)
        for value in current.params.values():
            for item in value if isinstance(value, list | tuple) else (value,):
                nested = getattr(item, "jaxpr", item)
                pending.extend(getattr(nested, "eqns", ()))


def _walk(jaxpr: Any, live_outputs: Sequence[bool], found: set[str], zeros: set[Any]) -> list[bool]:
    """Mark what the live outputs of ``jaxpr`` depend on; return which inputs they do."""
    zeros = _forward_zeros(jaxpr, zeros)
    live = {
        v for v, wanted in zip(jaxpr.outvars, live_outputs, strict=True) if wanted and _is_var(v)
    }
    for equation in reversed(jaxpr.eqns):
        outputs = [_is_var(v) and v in live for v in equation.outvars]
        if not any(outputs) or all(v in zeros for v in equation.outvars):
            continue  # unused, or a constant zero whatever its operands hold
        name = equation.primitive.name
        found.add(name)
        if name == "mul" and len(equation.invars) == 2:
            left, right = equation.invars
            reached = [not _is_zero(right, zeros), not _is_zero(left, zeros)]
        elif (nested := _nested_one_to_one(equation)) is not None:
            reached = _walk(
                getattr(nested, "jaxpr", nested), outputs, found, _constant_zeros(nested)
            )
        else:
            _all_primitives(equation, found)
            reached = [True] * len(equation.invars)
        live.update(v for v, r in zip(equation.invars, reached, strict=True) if r and _is_var(v))
    return [v in live for v in jaxpr.invars]
