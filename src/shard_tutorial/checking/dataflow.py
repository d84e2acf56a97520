"""What a traced program's outputs depend on: its live operations and inputs.

The judge asks of an answer not only which collectives its program contains but
whether their results reach the answer. XLA removes what nothing uses from the
program it compiles, but not ``0 * x`` for floating-point ``x`` (``0 * inf`` is
NaN, so the product is not zero for every ``x``): a collective whose result is
multiplied by zero, and added to an answer computed another way, stays in the
compiled program, runs and moves its bytes. This module walks the program JAX
traced (its jaxpr) back from the outputs, the way data flows, and stops at a
product with a constant zero, or at any other value that is zero whatever its
operands hold: ``x - x``, ``min(abs(x), 0)``, ``max(-x**2, 0)`` (it follows the sign of
each value: what ``abs``, squares and ``exp`` give is never negative). It is a teaching
aid's check for the usual shortcuts, not a proof: a zero that takes arithmetic to see
(``x * 1e-30`` added to numbers that drown it) is not recognised.
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
      neither factor; so is any value that is zero whatever its operands hold
      (``x - x``, ``min(abs(x), 0)``);
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
      >>> def token(x, y):  # y's part is zero for every finite y: min(|y|, 0), y - y
      ...     return x + jnp.minimum(jnp.abs(y), 0) + (y - y) + jnp.clip(-(y * y), 0, 1)
      >>> flow(jax.make_jaxpr(token)(1.0, 2.0)).inputs
      (True, False)
      >>> flow(jax.make_jaxpr(lambda x, y: x + jnp.minimum(y * y, 1))(1.0, 2.0)).inputs
      (True, True)
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    if not hasattr(inner, "eqns") or not hasattr(inner, "outvars"):
        msg = (
            f"jaxpr must be a traced program (a ClosedJaxpr or a Jaxpr), got {type(jaxpr).__name__}"
        )
        raise TypeError(msg)
    found: set[str] = set()
    inputs = _walk(inner, [True] * len(inner.outvars), found, _constant_zeros(jaxpr))
    return Flow(frozenset(found), tuple(inputs))


def _is_var(value: Any) -> bool:
    return hasattr(value, "aval") and not hasattr(value, "val")  # a Literal has .val


# What is known of a value whatever the program's inputs hold (for finite numbers): that
# it is zero, never negative, or never positive.
ZERO, NONNEG, NONPOS = "0", ">=0", "<=0"
Signs = dict[Any, str]

# Operations whose result is never negative, whatever their operand: zero where it is.
_NONNEGATIVE = frozenset({"abs", "exp", "exp2", "sqrt", "square"})


def _sign(value: Any, signs: Signs) -> str | None:
    """What is known of ``value``'s sign: :data:`ZERO`, :data:`NONNEG`, :data:`NONPOS`, None."""
    if hasattr(value, "val"):  # a Literal: a constant written into the program
        try:
            held = np.asarray(value.val)
            if np.all(held == 0):
                return ZERO
            if np.all(held >= 0):
                return NONNEG
            if np.all(held <= 0):
                return NONPOS
        except (TypeError, ValueError):
            return None
        return None
    return signs.get(value)


def _is_zero(value: Any, signs: Signs) -> bool:
    return _sign(value, signs) == ZERO


def _at_least(sign: str | None, bound: str) -> bool:
    """Whether a value of ``sign`` is known to be ``bound`` (zero counts as both bounds)."""
    return sign in (ZERO, bound)


def _constant_zeros(jaxpr: Any) -> Signs:
    """The variables of a closed program's top level bound to constant zero arrays."""
    signs: Signs = {}
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    for var, const in zip(
        getattr(inner, "constvars", ()), getattr(jaxpr, "consts", ()) or (), strict=False
    ):
        try:
            if np.size(const) <= 1 << 16 and bool(np.all(np.asarray(const) == 0)):
                signs[var] = ZERO
        except (TypeError, ValueError):
            continue
    return signs


def _sign_of(equation: Any, signs: Signs) -> str | None:
    """What is known of the sign of ``equation``'s (one) result, from its operands'."""
    name = equation.primitive.name
    operands = list(equation.invars)
    known = [_sign(v, signs) for v in operands]
    if name in _KEEPS_ZERO and operands:
        return known[0]
    if name in _NONNEGATIVE or (
        name == "integer_pow" and int(equation.params.get("y", 1)) % 2 == 0
    ):
        return ZERO if known and known[0] == ZERO else NONNEG
    if name == "neg" and known:
        return {ZERO: ZERO, NONNEG: NONPOS, NONPOS: NONNEG}.get(known[0] or "")
    if len(operands) != 2:
        if name == "select_n" and len(known) > 1 and all(k == ZERO for k in known[1:]):
            return ZERO  # every case it chooses from is zero
        return None
    a, b = known
    same = _is_var(operands[0]) and operands[0] is operands[1]
    if name == "mul":
        if ZERO in known:
            return ZERO
        if same or (a == b and a is not None):
            return NONNEG
        if {a, b} == {NONNEG, NONPOS}:
            return NONPOS
    elif name == "sub":
        if same:
            return ZERO
        if _at_least(a, NONNEG) and _at_least(b, NONPOS):
            return ZERO if a == b == ZERO else NONNEG
        if _at_least(a, NONPOS) and _at_least(b, NONNEG):
            return NONPOS
    elif name == "add":
        if a == b == ZERO:
            return ZERO
        for bound in (NONNEG, NONPOS):
            if _at_least(a, bound) and _at_least(b, bound):
                return bound
    elif name == "max":
        if (a == ZERO and _at_least(b, NONPOS)) or (b == ZERO and _at_least(a, NONPOS)):
            return ZERO
        if _at_least(a, NONNEG) or _at_least(b, NONNEG):
            return NONNEG
        if _at_least(a, NONPOS) and _at_least(b, NONPOS):
            return NONPOS
    elif name == "min":
        if (a == ZERO and _at_least(b, NONNEG)) or (b == ZERO and _at_least(a, NONNEG)):
            return ZERO
        if _at_least(a, NONPOS) or _at_least(b, NONPOS):
            return NONPOS
        if _at_least(a, NONNEG) and _at_least(b, NONNEG):
            return NONNEG
    return None


def _forward_signs(jaxpr: Any, signs: Signs) -> Signs:
    """``signs`` and what follows for the variables ``jaxpr`` computes from them.

    A nested program called once (:data:`_CALLS`) is followed inside, from what is
    known of its operands, and its results' signs come back out.
    """
    signs = dict(signs)
    for equation in jaxpr.eqns:
        nested = called_program(equation)
        if nested is not None:
            program = getattr(nested, "jaxpr", nested)
            inner = _forward_signs(program, _seeds(nested, equation.invars, signs))
            for outer, result in zip(equation.outvars, program.outvars, strict=True):
                found = _sign(result, inner)
                if found is not None and _is_var(outer):
                    signs[outer] = found
            continue
        if len(equation.outvars) != 1 or not _is_var(equation.outvars[0]):
            continue
        found = _sign_of(equation, signs)
        if found is not None:
            signs[equation.outvars[0]] = found
    return signs


def _seeds(nested: Any, operands: Sequence[Any], signs: Signs) -> Signs:
    """What is known of a nested program's inputs, from the operands it is called with."""
    program = getattr(nested, "jaxpr", nested)
    seeds = _constant_zeros(nested)
    for inner, outer in zip(program.invars, operands, strict=True):
        found = _sign(outer, signs)
        if found is not None:
            seeds[inner] = found
    return seeds


def called_program(equation: Any) -> Any | None:
    """The program a call (``jit``, ``shard_map``, ``checkpoint``, ...) runs, its inputs and outputs.

    Args:
      equation: one equation of a traced program.

    Returns:
      The nested program (a ``ClosedJaxpr`` or a ``Jaxpr``) the equation calls once,
      its inputs and outputs the equation's, in order; None for any other equation
      (arithmetic, a loop, a conditional).

    Examples:
      >>> import jax
      >>> from shard_tutorial.checking.dataflow import called_program
      >>> traced = jax.make_jaxpr(lambda x: jax.jit(jax.numpy.sin)(x) * 2)(1.0)
      >>> call, product = traced.jaxpr.eqns
      >>> [e.primitive.name for e in called_program(call).jaxpr.eqns], called_program(product)
      (['sin'], None)
    """
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


def _walk(jaxpr: Any, live_outputs: Sequence[bool], found: set[str], signs: Signs) -> list[bool]:
    """Mark what the live outputs of ``jaxpr`` depend on; return which inputs they do."""
    signs = _forward_signs(jaxpr, signs)
    live = {
        v for v, wanted in zip(jaxpr.outvars, live_outputs, strict=True) if wanted and _is_var(v)
    }
    for equation in reversed(jaxpr.eqns):
        outputs = [_is_var(v) and v in live for v in equation.outvars]
        if not any(outputs) or all(_is_zero(v, signs) for v in equation.outvars):
            continue  # unused, or zero whatever its operands hold
        name = equation.primitive.name
        found.add(name)
        if name == "mul" and len(equation.invars) == 2:
            left, right = equation.invars
            reached = [not _is_zero(right, signs), not _is_zero(left, signs)]
        elif (nested := called_program(equation)) is not None:
            reached = _walk(
                getattr(nested, "jaxpr", nested),
                outputs,
                found,
                _seeds(nested, equation.invars, signs),
            )
        elif name == "cond" and equation.params.get("branches"):
            reached = _walk_branches(equation, outputs, found, signs)
        else:
            _all_primitives(equation, found)
            reached = [True] * len(equation.invars)
        live.update(v for v, r in zip(equation.invars, reached, strict=True) if r and _is_var(v))
    return [v in live for v in jaxpr.invars]


def _walk_branches(
    equation: Any, outputs: Sequence[bool], found: set[str], signs: Signs
) -> list[bool]:
    """:func:`_walk` of a ``lax.cond`` (or ``lax.switch``): which of its operands are used.

    Its first operand picks the branch that runs. A constant one (a Python ``bool``
    given to ``lax.cond``) picks one branch: only that one is walked. Otherwise any
    branch may run, and an operand counts if one of them uses it; but an operation
    counts as reaching the outputs only if every branch has it live: one that a single
    branch holds may never run (a collective behind a predicate no case makes true).
    """
    branches = list(equation.params["branches"])
    index, operands = equation.invars[0], list(equation.invars[1:])
    if hasattr(index, "val"):  # a Literal: the branch is known when the program is traced
        try:
            chosen = int(np.clip(int(np.asarray(index.val)), 0, len(branches) - 1))
        except (TypeError, ValueError):
            chosen = None
        if chosen is not None:
            branches = [branches[chosen]]
    used = [False] * len(operands)
    each: list[set[str]] = []
    for branch in branches:
        live: set[str] = set()
        reached = _walk(
            getattr(branch, "jaxpr", branch), outputs, live, _seeds(branch, operands, signs)
        )
        used = [a or b for a, b in zip(used, reached, strict=True)]
        each.append(live)
    found.update(set.intersection(*each) if each else set())
    return [not hasattr(index, "val"), *used]
