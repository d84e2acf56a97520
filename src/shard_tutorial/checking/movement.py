"""Which collectives of a traced program carry an input unchanged: data that must stay put.

Some problems say what never leaves its device: a pipeline stage's layers, the
experts of a mixture, the rows of a batch split for data parallelism. A solution
that passes such data round a ring of ``ppermute``s, all-reduces zero-padded
blocks of it (``psum`` as a gather), or re-splits it with an ``all_to_all``, can
still compute right values and send few bytes. This module follows, in the
program JAX traced (its jaxpr), which values are the data of chosen inputs
*rearranged*: sliced, reshaped, transposed, padded with constants, concatenated,
selected from, converted, or passed through a collective; and it names the
collectives whose operands are such values. Arithmetic ends it (a product, a sum
with other values, a matmul, ``tanh``): what a right answer sends is computed
from the data (an activation, a gradient), not the data itself.

Like :mod:`shard_tutorial.checking.dataflow` it is a teaching aid's check of the
usual shortcuts, not a proof: data multiplied by a one-hot mask, then summed over
the devices, is arithmetic here, and is left to the problems' budgets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from shard_tutorial.checking.dataflow import called_program

# Operations whose outputs are their array operands' data rearranged (and constants):
# each output is moved data if any of the operands listed is (None: every operand).
_REARRANGES: dict[str, tuple[int, ...] | None] = {
    "broadcast_in_dim": None,
    "concatenate": None,
    "convert_element_type": None,
    "copy": None,
    "copy_p": None,
    "dynamic_slice": (0,),
    # A block written into a buffer moves the block's data; the buffer's own data, where
    # the block overwrites it, is gone (optimizer state updated in place, then the new
    # rows sliced out): only the update is followed.
    "dynamic_update_slice": (1,),
    "expand_dims": None,
    "gather": (0,),
    "pad": None,
    "pbroadcast": None,
    "pvary": None,
    "reduce_precision": None,
    "reshape": None,
    "rev": None,
    "scatter": (2,),  # the updates, as for dynamic_update_slice
    "select_n": None,  # the predicate's data is rearranged only if it is chosen from: rare
    "sharding_constraint": None,
    "slice": None,
    "split": None,
    "squeeze": None,
    "tile": None,
    "transpose": None,
}

# Operations whose i-th output is their i-th operand, moved or not.
_ONE_TO_ONE = frozenset({"device_put", "optimization_barrier", "mesh_cast", "reshard"})

COLLECTIVES = frozenset(
    {
        "all_gather",
        "all_gather_invariant",
        "all_to_all",
        "pmax",
        "pmin",
        "ppermute",
        "pshuffle",
        "psum",
        "psum2",
        "psum_invariant",
        "psum_scatter",
        "ragged_all_to_all",
        "reduce_scatter",
    }
)
"""The primitives that move data between devices, by their names in a jaxpr."""


@dataclasses.dataclass(frozen=True)
class Moved:
    """Where the chosen inputs' data goes, unchanged, in a traced program.

    Attributes:
      collectives: the collectives (primitive names, see :data:`COLLECTIVES`) whose
        operands hold that data, rearranged.
      outputs: for each output of the program, whether it is that data rearranged.
    """

    collectives: frozenset[str]
    outputs: tuple[bool, ...]


def moved(jaxpr: Any, sources: Sequence[bool]) -> Moved:
    """The collectives that carry the data of the ``sources`` inputs of ``jaxpr``, rearranged.

    Args:
      jaxpr: a traced program, a ``ClosedJaxpr`` (as ``jax.make_jaxpr`` returns) or a
        ``Jaxpr``.
      sources: for each of its inputs, whether its data is to stay put.

    Returns:
      A :class:`Moved`: the collectives whose operands are that data, sliced,
      padded, reshaped, concatenated or selected from, or passed on by another
      collective (a ring's later hops); and which outputs are. Nested programs
      (``jit``, ``shard_map``, ``checkpoint``, custom derivatives), loops (``scan``,
      ``fori_loop``, ``while_loop``, their carried values to a fixed point) and the
      branches of ``cond`` are followed inside.

    Raises:
      TypeError: ``jaxpr`` is not a traced program.
      ValueError: ``sources`` has not one entry per input.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import Mesh, PartitionSpec as P
      >>> from shard_tutorial.checking.movement import moved
      >>> mesh = Mesh(jax.devices()[:1], ("x",))
      >>> def ring(w, h):  # w's block passed on, the activation computed
      ...     def body(w, h):
      ...         w = jax.lax.ppermute(w[1:], "x", [(0, 0)])
      ...         return jax.lax.psum(jnp.tanh(h @ w), "x")
      ...     return jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P(),
      ...                          check_vma=False)(w, h)
      >>> traced = jax.make_jaxpr(ring)(jnp.ones((3, 2)), jnp.ones((1, 2)))
      >>> found = moved(traced, [True, False])
      >>> sorted(found.collectives), found.outputs
      (['ppermute'], (False,))
      >>> moved(traced, [False, True]).collectives
      frozenset()
      >>> padded = jax.make_jaxpr(lambda x: jnp.pad(x, (0, 3)).T)(jnp.ones(2))
      >>> moved(padded, [True]).outputs
      (True,)
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    if not hasattr(inner, "eqns") or not hasattr(inner, "invars"):
        msg = (
            f"jaxpr must be a traced program (a ClosedJaxpr or a Jaxpr), got {type(jaxpr).__name__}"
        )
        raise TypeError(msg)
    if len(sources) != len(inner.invars):
        msg = f"sources must have one entry per input of jaxpr ({len(inner.invars)}), got {len(sources)}"
        raise ValueError(msg)
    found: set[str] = set()
    outputs = _walk(inner, list(sources), found)
    return Moved(frozenset(found), tuple(outputs))


def _walk(jaxpr: Any, sources: list[bool], found: set[str]) -> list[bool]:
    """Which outputs of ``jaxpr`` are moved data; the carrying collectives added to ``found``."""
    marked: dict[Any, bool] = {}
    for var, is_source in zip(jaxpr.invars, sources, strict=True):
        if is_source:
            marked[var] = True
    for eqn in jaxpr.eqns:
        ins = [_is_marked(marked, v) for v in eqn.invars]
        if not any(ins):
            continue
        outs = _equation(eqn, ins, found)
        for var, is_moved in zip(eqn.outvars, outs, strict=False):
            if is_moved:
                marked[var] = True
    return [_is_marked(marked, v) for v in jaxpr.outvars]


def _is_marked(marked: dict[Any, bool], var: Any) -> bool:
    if hasattr(var, "val"):  # a Literal: a constant, never an input's data
        return False
    return marked.get(var, False)


def _equation(eqn: Any, ins: list[bool], found: set[str]) -> list[bool]:
    """Which outputs of one equation are moved data, given which operands are."""
    name = eqn.primitive.name
    count = len(eqn.outvars)
    if name in COLLECTIVES:
        found.add(name)
        if len(ins) == count:
            return ins
        return [any(ins)] * count
    if name in _ONE_TO_ONE and len(ins) == count:
        return ins
    if name in _REARRANGES:
        which = _REARRANGES[name]
        chosen = ins if which is None else [ins[i] for i in which if i < len(ins)]
        return [any(chosen)] * count
    if name in {"scan", "while"}:
        return _loop(eqn, ins, found)
    if name == "cond":
        outs = [False] * count
        for branch in eqn.params.get("branches", ()):
            inner = getattr(branch, "jaxpr", branch)
            if len(inner.invars) == len(ins) - 1:
                got = _walk(inner, ins[1:], found)
                outs = [a or b for a, b in zip(outs, got, strict=True)]
        return outs
    called = called_program(eqn)  # jit, shard_map, checkpoint, custom derivatives
    if called is not None:
        return _walk(getattr(called, "jaxpr", called), ins, found)
    return [False] * count  # arithmetic, or an operation not known: the data is consumed


def _loop(eqn: Any, ins: list[bool], found: set[str]) -> list[bool]:
    """A ``scan`` or ``while``: its body walked until what its carried values hold settles."""
    params = eqn.params
    if eqn.primitive.name == "while":
        body = getattr(params["body_jaxpr"], "jaxpr", params["body_jaxpr"])
        skip = int(params.get("cond_nconsts", 0))
        consts = int(params.get("body_nconsts", 0))
        state = ins[skip:]
        carried = range(consts, len(state))
        carry_outs = range(len(state) - consts)
    else:
        body = getattr(params["jaxpr"], "jaxpr", params["jaxpr"])
        consts, carries = _scan_counts(params)
        state = list(ins)
        carried = range(consts, consts + carries)
        carry_outs = range(carries)
    if len(body.invars) != len(state):
        return [False] * len(eqn.outvars)
    for _ in range(len(state) + 1):  # each round marks one more carried value, or settles
        outs = _walk(body, state, found)
        grown = False
        for position, out in zip(carried, carry_outs, strict=True):
            if outs[out] and not state[position]:
                state[position] = grown = True
        if not grown:
            break
    if eqn.primitive.name == "while":
        return outs
    return outs if len(outs) == len(eqn.outvars) else [False] * len(eqn.outvars)


def _scan_counts(params: dict[str, Any]) -> tuple[int, int]:
    """A scan's numbers of constants and of carried values (jax 0.10 names them; 0.12's tree)."""
    if "num_consts" in params:
        return int(params["num_consts"]), int(params["num_carry"])
    groups = getattr(params.get("ft_in"), "elts", None)  # jax 0.12: (consts, carry, xs)
    if groups is not None and len(groups) == 3:
        return len(groups[0]), len(groups[1])
    return 0, 0  # not known: no value is taken as carried round the loop
