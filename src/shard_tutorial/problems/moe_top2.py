"""Problem "Top-2 mixture of experts with a capacity": fixed-size buffers, dropped tokens.

A top-2 mixture-of-experts layer sends each token to two experts, its two best by
the router's logits, and adds their outputs weighted by gates (a softmax of the two
chosen logits). With the experts split over an ``"expert"`` mesh axis, every token
travels to its experts' devices and back (two all-to-alls, as in Part V's
:mod:`~shard_tutorial.problems.expert_parallel_moe`). What makes it trainable at
scale is the *capacity*: each device sends each expert at most ``capacity``
choices, so the buffers the all-to-alls exchange have a fixed shape, ``(E,
capacity, D)``, whatever the router decides; choices beyond it are dropped. Under
``jax.jit`` every shape is then static, and the program compiles once. The load
balancing loss ``aux`` (Shazeer et al., 2017; Fedus et al., 2021) pushes the router
to spread the tokens, so that fewer are dropped.
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
from shard_tutorial.meshes import axis_mesh, device_counts, place, usable_device_count
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
    check_moe_shapes,
    require_whole_number,
)

__all__ = ["PROBLEM", "moe_top2", "numpy_moe_top2"]


def moe_top2(
    x: jax.Array, router_logits: jax.Array, w: jax.Array, capacity: int
) -> tuple[jax.Array, jax.Array]:
    """Top-2 mixture of experts with a capacity per device and expert, and its balancing loss.

    The mesh is ``axis_mesh("expert", math.gcd(T, E))``: one axis, ``"expert"``,
    with ``n`` devices, the most (up to all of them) that divide both
    the number of tokens ``T`` and the number of experts ``E``. The rows of ``x``
    and of ``router_logits`` (the tokens) are split over ``"expert"``, ``T / n``
    per device, and so are the experts, ``E / n`` consecutive ones per device:
    expert ``e`` is on device ``e // (E / n)``.

    Routing, for each token: ``e1`` is the argmax of its logits and ``e2`` the
    argmax of the others (``e1`` excluded), the first index on ties for both.
    The gates ``g1, g2`` are the softmax of the two chosen logits (not of all
    ``E``). On each device, each expert has ``capacity`` slots for that device's
    choices: they are filled first by the first choices (``e1``) of the device's
    tokens in token order, then by the second choices (``e2``) in token order; a
    choice that finds its expert full is dropped (it adds nothing). Row ``t`` of
    ``y`` is the sum of ``g * (x[t] @ w[e])`` over token ``t``'s kept choices
    (zeros if both were dropped). ``aux`` is the load-balancing loss ``E * sum_e
    f_e * p_e``, with ``f_e`` the fraction of all ``T`` tokens whose first choice
    is ``e`` and ``p_e`` the mean over all ``T`` tokens of
    ``softmax(router_logits[t])[e]``.

    This problem practises expert parallelism with a fixed capacity, with
    ``jax.shard_map`` and two ``jax.lax.all_to_all``: each device fills an
    ``(E, capacity, D)`` buffer with its kept choices and one all-to-all sends each
    expert's slots to that expert's device (the dispatch), which runs its experts on
    them; a second all-to-all brings the ``(E, capacity, F)`` results back (the
    return), and neither ``x`` nor ``w`` is ever gathered whole. Each device sends
    what those two all-to-alls send, and an all-reduce of ``2 E`` numbers (the
    first-choice counts and the summed probabilities ``aux`` needs), no more: the
    checker's budget, read from the compiled program. At ``capacity`` 0 every buffer
    is empty and XLA drops the all-to-alls from the compiled program, so that case
    is judged from the program JAX traced.

    How the arguments arrive: placed on the Explicit mesh ``axis_mesh("expert",
    math.gcd(T, E))``, ``x``, ``router_logits`` and ``w`` each as ``P("expert")``;
    ``capacity`` as a Python int.

    Args:
      x: the tokens, shape (T, D), floating-point, T >= 1.
      router_logits: the router's score of each expert for each token, shape
        (T, E), floating-point, E >= 2.
      w: the experts' weights, shape (E, D, F), floating-point: expert ``e`` maps
        a token to ``x[t] @ w[e]``.
      capacity: the most choices each device may send to each expert, an int >= 0.

    Returns:
      ``(y, aux)``: ``y`` of shape (T, F), its rows split over ``"expert"``
      (``P("expert")``); ``aux`` a scalar, replicated (``P()``).

    Raises:
      TypeError: for a non-array, a dtype that is not floating-point, or a
        ``capacity`` that is not an int.
      ValueError: for a wrong rank, shapes that do not fit together, no tokens,
        fewer than 2 experts, no features or no outputs, or a negative ``capacity``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import moe_top2
      >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> logits = jnp.array([[0.0, 1.0], [0.0, 0.0]])  # token 1: a tie, expert 0 first
      >>> w = jnp.array([[[1.0], [0.0]], [[0.0], [1.0]]])  # expert 0 keeps x[0], expert 1 x[1]
      >>> y, aux = moe_top2(x, logits, w, 1)
      >>> y.round(4), aux.round(4)
      (Array([[1.7311],
             [3.5   ]], dtype=float32), Array(1., dtype=float32))

      With ``capacity`` 0 every choice is dropped; ``aux`` does not depend on it:

      >>> y, aux = moe_top2(x, logits, w, 0)
      >>> y, aux.round(4)
      (Array([[0.],
             [0.]], dtype=float32), Array(1., dtype=float32))

      On 8 devices, 16 tokens and 8 experts: 2 tokens and one expert per device.

      >>> y, aux = moe_top2(jnp.ones((16, 4)), jnp.eye(16, 8), jnp.ones((8, 4, 3)), 2)
      >>> dict(y.sharding.mesh.shape), tuple(y.sharding.spec), aux.sharding.is_fully_replicated
      ({'expert': 8}, ('expert', None), True)
    """
    capacity = _check_inputs(x, router_logits, w, capacity)
    tokens, experts = x.shape[0], w.shape[0]
    traced = any(isinstance(a, jax.core.Tracer) for a in (x, router_logits, w))
    mesh = axis_mesh("expert", math.gcd(tokens, experts), traced=traced)
    x, router_logits, w = place((x, router_logits, w), NamedSharding(mesh, P("expert")))
    return _moe(mesh, capacity)(x, router_logits, w)


def _check_inputs(x: object, router_logits: object, w: object, capacity: object) -> int:
    """Raise unless the arguments fit the statement; return ``capacity`` as an int.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.moe_top2 import _check_inputs
      >>> _check_inputs(np.ones((4, 2)), np.ones((4, 3)), np.ones((3, 2, 1)), 2)
      2
      >>> _check_inputs(np.ones((4, 2)), np.ones((4, 1)), np.ones((1, 2, 1)), 2)
      Traceback (most recent call last):
      ...
      ValueError: top-2 routing needs at least 2 experts (E >= 2), got router_logits of shape (4, 1)
    """
    check_array(x, "x", ndim=2, layout="of shape (T, D)")
    check_array(router_logits, "router_logits", ndim=2, layout="of shape (T, E)")
    check_array(w, "w", ndim=3, layout="of shape (E, D, F)")
    for value, name in ((x, "x"), (router_logits, "router_logits"), (w, "w")):
        check_floating(value, name)  # type: ignore[arg-type]
    if isinstance(capacity, float | np.floating):  # a count of slots: 2.0 is not an int
        msg = f"capacity must be an int (a count of slots), got float: {capacity!r}"
        raise TypeError(msg)
    capacity = require_whole_number(capacity, "capacity", minimum=0)
    tokens, d, experts, f = check_moe_shapes(x, router_logits, w)
    if tokens == 0:
        msg = f"x must hold at least one token (T >= 1), got x of shape {np.shape(x)}"
        raise ValueError(msg)
    if experts < 2:
        msg = (
            "top-2 routing needs at least 2 experts (E >= 2), got router_logits of shape "
            f"{np.shape(router_logits)}"
        )
        raise ValueError(msg)
    if min(d, f) == 0:
        msg = f"D and F must be at least 1, got x {np.shape(x)} and w {np.shape(w)}"
        raise ValueError(msg)
    return capacity


def _route(logits: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Each token's two experts (the first index on ties) and their gates."""
    experts = logits.shape[1]
    e1 = jnp.argmax(logits, axis=1)
    # The other E - 1 experts of each token, in order, e1 left out: robust to ties
    # and to infinite logits (a -inf mask could pick e1 again).
    others = jnp.arange(experts - 1)[None, :]
    others = others + (others >= e1[:, None])
    e2 = jnp.take_along_axis(
        others, jnp.argmax(jnp.take_along_axis(logits, others, 1), 1)[:, None], 1
    )[:, 0]
    chosen = jnp.stack([jnp.take_along_axis(logits, e[:, None], 1)[:, 0] for e in (e1, e2)], axis=1)
    gates = jax.nn.softmax(chosen, axis=1)  # of the two chosen logits only
    return e1, e2, gates[:, 0], gates[:, 1]


def _slots(e1: jax.Array, e2: jax.Array, experts: int) -> tuple[jax.Array, jax.Array]:
    """Each choice's slot at its expert: first choices in token order, then the second ones."""
    first = jax.nn.one_hot(e1, experts, dtype=jnp.int32)  # (t, E)
    second = jax.nn.one_hot(e2, experts, dtype=jnp.int32)
    before1 = jnp.cumsum(first, axis=0) - first  # earlier first choices of each expert
    before2 = jnp.cumsum(second, axis=0) - second
    slot1 = jnp.sum(before1 * first, axis=1)
    # Every first choice of the device comes before any second choice.
    slot2 = jnp.sum((jnp.sum(first, axis=0)[None, :] + before2) * second, axis=1)
    return slot1, slot2


def _local(
    x: jax.Array, logits: jax.Array, w: jax.Array, *, capacity: int
) -> tuple[jax.Array, jax.Array]:
    """One device: route its tokens, dispatch, run its experts, return, combine; aux."""
    devices = jax.lax.axis_size("expert")
    experts, (local_experts, _, features) = logits.shape[1], w.shape
    e1, e2, g1, g2 = _route(logits)
    slot1, slot2 = _slots(e1, e2, experts)
    # A (t, E, capacity) one-hot of each kept choice's expert and slot: a choice past
    # the capacity has no slot (one_hot of an index >= capacity is all zeros).
    where1 = (
        jax.nn.one_hot(e1, experts, dtype=x.dtype)[:, :, None]
        * jax.nn.one_hot(slot1, capacity, dtype=x.dtype)[:, None, :]
    )
    where2 = (
        jax.nn.one_hot(e2, experts, dtype=x.dtype)[:, :, None]
        * jax.nn.one_hot(slot2, capacity, dtype=x.dtype)[:, None, :]
    )
    outbox = jnp.einsum("tec,td->ecd", where1 + where2, x)  # (E, capacity, D)
    # Dispatch: expert e's slots go to device e // (E / n); inbox[s * E/n + k] holds
    # what device s sent this device's expert k.
    inbox = jax.lax.all_to_all(outbox, "expert", split_axis=0, concat_axis=0, tiled=True)
    inbox = inbox.reshape(devices, local_experts, capacity, x.shape[1])
    results = jnp.einsum("skcd,kdf->skcf", inbox, w).reshape(experts, capacity, features)
    # Return: the slots of sender s go back to device s; back[e] is expert e's results.
    back = jax.lax.all_to_all(results, "expert", split_axis=0, concat_axis=0, tiled=True)
    gates = (
        g1[:, None, None].astype(back.dtype) * where1
        + g2[:, None, None].astype(back.dtype) * where2
    )
    y = jnp.einsum("tec,ecf->tf", gates.astype(back.dtype), back)
    # aux: the first-choice counts and the summed probabilities, over every token.
    probs = jax.nn.softmax(logits, axis=1)
    counts = jnp.sum(jax.nn.one_hot(e1, experts, dtype=probs.dtype), axis=0)
    totals = jax.lax.psum(jnp.stack([counts, jnp.sum(probs, axis=0)]), "expert")
    tokens = logits.shape[0] * devices
    aux = experts * jnp.sum((totals[0] / tokens) * (totals[1] / tokens))
    return y, aux


@functools.cache
def _moe(
    mesh: Mesh, capacity: int
) -> Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """Build, once per mesh and capacity, the compiled layer."""
    return jax.jit(
        jax.shard_map(
            functools.partial(_local, capacity=capacity),
            mesh=mesh,
            in_specs=(P("expert"), P("expert"), P("expert")),  # tokens, their logits, experts
            out_specs=(P("expert"), P()),  # each token's row on its device; aux everywhere
        )
    )


def unsharded(
    x: jax.Array, router_logits: jax.Array, w: jax.Array, capacity: int
) -> tuple[jax.Array, jax.Array]:
    """The layer on one device (one device's capacity): what fixes the results' dtypes.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.moe_top2 import unsharded
      >>> logits = jnp.array([[1.0, 0.0], [1.0, 0.0]])  # both tokens: expert 0, then 1
      >>> y, aux = unsharded(jnp.ones((2, 1)), logits, jnp.ones((2, 1, 1)), 1)
      >>> y[:, 0], round(float(aux), 4)  # capacity 1: token 1 finds both experts full
      (Array([1., 0.], dtype=float32), 1.4621)
    """
    experts = router_logits.shape[1]
    e1, e2, g1, g2 = _route(router_logits)
    slot1, slot2 = _slots(e1, e2, experts)
    first, second = (
        jnp.where((slot < capacity)[:, None], g[:, None] * jnp.einsum("td,tdf->tf", x, w[e]), 0)
        for e, g, slot in ((e1, g1, slot1), (e2, g2, slot2))
    )
    y = first + second
    probs = jax.nn.softmax(router_logits, axis=1)
    f = jnp.mean(jax.nn.one_hot(e1, experts, dtype=probs.dtype), axis=0)
    return y, experts * jnp.sum(f * jnp.mean(probs, axis=0))


def numpy_moe_top2(
    x: np.ndarray,
    router_logits: np.ndarray,
    w: np.ndarray,
    capacity: int,
    devices: int,
    *,
    seconds_first: bool = False,
    full_softmax: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The layer in NumPy, token by token, on ``devices`` blocks of tokens, at 64 bits.

    The oracle (with its defaults), and the classic mistakes: ``seconds_first``
    fills each expert's slots with the second choices before the first ones;
    ``full_softmax`` takes the gates from the softmax of all ``E`` logits. Counting
    the capacity over all tokens rather than per device is ``devices=1``.

    Args:
      x: the tokens, (T, D).
      router_logits: the router's logits, (T, E).
      w: the experts, (E, D, F).
      capacity: the slots each device has at each expert.
      devices: how many blocks of ``T / devices`` tokens fill their slots apart.
      seconds_first: fill the slots with the second choices first (a mistake).
      full_softmax: gates from the softmax of every logit (a mistake).

    Returns:
      ``(y, aux)``, float64.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.moe_top2 import numpy_moe_top2
      >>> logits = np.array([[2.0, 0.0], [0.0, 2.0]])  # token 0: 0 then 1; token 1: 1 then 0
      >>> w = np.array([[[1.0]], [[10.0]]])  # expert 0 multiplies by 1, expert 1 by 10
      >>> y, aux = numpy_moe_top2(np.ones((2, 1)), logits, w, 1, 1)
      >>> y[:, 0].round(4), round(float(aux), 4)  # capacity 1: the first choices fill both
      (array([0.8808, 8.808 ]), 1.0)
      >>> numpy_moe_top2(np.ones((2, 1)), logits, w, 1, 2)[0][:, 0].round(4)  # 2 devices
      array([2.0728, 8.9272])
    """
    x, logits, w = precise(x), precise(router_logits), precise(w)
    tokens, experts = logits.shape
    first, second, gates = [], [], []
    for row in logits:
        e1 = int(np.argmax(row))  # the first index on ties
        others = [e for e in range(experts) if e != e1]
        e2 = others[int(np.argmax(row[others]))]
        chosen = row[[e1, e2]] if not full_softmax else row
        p = np.exp(chosen - chosen.max())
        p /= p.sum()
        first.append(e1)
        second.append(e2)
        gates.append((p[0], p[1]) if not full_softmax else (p[e1], p[e2]))
    y = np.zeros((tokens, w.shape[2]))
    per_device = tokens // devices
    for device in range(devices):
        block = range(device * per_device, (device + 1) * per_device)
        used = np.zeros(experts, int)
        rounds = ((1, second), (0, first)) if seconds_first else ((0, first), (1, second))
        for which, choice in rounds:
            for t in block:
                e = choice[t]
                if used[e] < capacity:
                    used[e] += 1
                    y[t] += gates[t][which] * (x[t] @ w[e])
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    f = np.bincount(first, minlength=experts) / tokens
    aux = experts * np.sum(f * probs.mean(axis=0))
    return y, np.asarray(aux, np.float64)


def _oracle(
    x: np.ndarray, router_logits: np.ndarray, w: np.ndarray, capacity: int, *, devices: int
) -> tuple[np.ndarray, np.ndarray]:
    return numpy_moe_top2(x, router_logits, w, capacity, devices)


def local_aux(router_logits: np.ndarray, devices: int) -> list[float]:
    """Each device's ``aux`` from its own ``T / devices`` tokens: the mistake of no psum.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.moe_top2 import local_aux
      >>> logits = np.array([[5.0, 0.0], [0.0, 5.0]])
      >>> [round(a, 3) for a in local_aux(logits, 2)]  # each device alone: badly balanced
      [1.987, 1.987]
    """
    experts = router_logits.shape[1]
    logits = precise(router_logits)
    found = []
    for block in np.split(logits, devices):
        probs = np.exp(block - block.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        f = np.bincount(np.argmax(block, axis=1), minlength=experts) / len(block)
        found.append(float(experts * np.sum(f * probs.mean(axis=0))))
    return found


def _contract_devices(args: tuple[Any, ...], devices: int) -> int:
    x, _, w, _ = args
    return usable_device_count(math.gcd(np.shape(x)[0], np.shape(w)[0]), devices)


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: the most devices that divide both T and E."""
    return (_contract_devices(args, devices),)


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as the contract says they arrive: tokens and experts over ``"expert"``."""
    x, logits, w, capacity = args
    mesh = axis_mesh("expert", math.gcd(np.shape(x)[0], np.shape(w)[0]))
    return (*place((x, logits, w), NamedSharding(mesh, P("expert"))), capacity)


def _explain(
    case: Case, expected: tuple[np.ndarray, np.ndarray], received: tuple[np.ndarray, np.ndarray]
) -> str | None:
    """Recognise the classic mistakes of a top-2 layer with a capacity.

    - the second choices given slots before the first ones;
    - the capacity counted over all tokens, not per device;
    - the gates from the softmax of all E logits, not of the two chosen;
    - ``aux`` from a device's own tokens only (or the mean of those), no psum.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems import get_problem
      >>> from shard_tutorial.problems.moe_top2 import _explain, numpy_moe_top2
      >>> problem = get_problem("moe_top2")
      >>> case = problem.cases[1]  # T=32, E=16, capacity 1
      >>> right = problem.expected(case, 8)
      >>> seconds = numpy_moe_top2(*case.args, 8, seconds_first=True)[0]
      >>> print(_explain(case, right, (seconds, right[1])))
      the second choices took the experts' slots before the first choices (8 devices): ...
    """
    x, logits, w, capacity = case.args
    got_y, got_aux = (precise(np.asarray(r)) for r in received)
    want_y, want_aux = (precise(np.asarray(e)) for e in expected)
    if got_y.shape != want_y.shape or got_aux.shape != ():
        return None

    def close(a: np.ndarray, b: np.ndarray) -> bool:
        return bool(np.allclose(a, b, rtol=1e-4, atol=1e-4 * (1 + np.abs(b).max(initial=0))))

    tokens, experts = logits.shape
    counts = [1, *device_counts(math.gcd(tokens, experts))]
    if close(got_y, want_y):
        if close(got_aux, want_aux):
            return None
        for devices in counts[1:]:
            each = local_aux(logits, devices)
            if any(close(got_aux, np.asarray(a)) for a in each) or close(
                got_aux, np.asarray(np.mean(each))
            ):
                return (
                    f"aux is that of one device's own {tokens // devices} tokens (or the mean "
                    f"of the {devices} devices' own), not of all {tokens}: f_e * p_e is a "
                    "product of two means over every token, so psum the first-choice counts "
                    'and the summed probabilities over "expert" before multiplying them'
                )
        return None

    def looks_like(mistake: np.ndarray) -> bool:  # and the case tells it from the right y
        return close(got_y, mistake) and not close(mistake, want_y)

    for devices in counts:
        if looks_like(numpy_moe_top2(x, logits, w, capacity, devices, seconds_first=True)[0]):
            return (
                "the second choices took the experts' slots before the first choices "
                f"({devices} device{'s' if devices > 1 else ''}): fill every expert's "
                "capacity with the first choices of the device's tokens, in token order, "
                "and only then with the second choices"
            )
        if looks_like(numpy_moe_top2(x, logits, w, capacity, devices, full_softmax=True)[0]):
            return (
                "the gates are the softmax of all E logits taken at e1 and e2, which do not "
                "add up to 1: the gates are the softmax of the two chosen logits only"
            )
    for devices in counts:
        if looks_like(numpy_moe_top2(x, logits, w, capacity, devices)[0]):
            return (
                f"the capacity was counted over {tokens // devices} tokens "
                f"({'all of them' if devices == 1 else f'{devices} devices'}), not over each "
                "device's own: each device has capacity slots at each expert for its own "
                "tokens' choices, as its (E, capacity, D) buffer has"
            )
    return None


def _make(
    rng: np.random.Generator,
    label: str,
    tokens: int,
    d: int,
    experts: int,
    f: int,
    capacity: int,
    *,
    skew: float = 0.0,
) -> Case:
    """A case of random normal numbers; ``skew`` favours the first experts (so they fill)."""
    logits = rng.normal(size=(tokens, experts)) - skew * np.arange(experts) / experts
    return Case(
        label,
        (
            rng.normal(size=(tokens, d)).astype(np.float32),
            logits.astype(np.float32),
            rng.normal(size=(experts, d, f)).astype(np.float32),
            int(capacity),
        ),
    )


def _generate(rng: np.random.Generator) -> Case:
    """One random case: up to 8 devices' worth of tokens and experts, a capacity up to 3."""
    n = int(rng.integers(1, 9))
    tokens, experts = n * int(rng.integers(1, 5)), n * int(rng.integers(1, 3))
    experts = max(experts, 2)
    d, f, capacity = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.integers(0, 4))
    label = f"random: T={tokens}, D={d}, E={experts}, F={f}, capacity={capacity}"
    return _make(rng, label, tokens, d, experts, f, capacity, skew=float(rng.uniform(0, 3)))


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261128)
    example = Case(
        "example from the problem statement",
        (
            np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
            np.array([[0.0, 1.0], [0.0, 0.0]], np.float32),
            np.array([[[1.0], [0.0]], [[0.0], [1.0]]], np.float32),
            1,
        ),
    )
    tied_logits = np.repeat(np.array([[1, 3, 3, 0, 2, 3, 1, 0]], np.float32), 16, axis=0)
    tied_logits[8:] = np.roll(tied_logits[8:], 2, axis=1)
    tied = _make(rng, "T=16, E=8, capacity 1: ties go to the first expert", 16, 3, 8, 2, 1)
    tied = Case(tied.label, (tied.args[0], tied_logits, tied.args[2], 1))
    return [
        example,
        _make(rng, "T=32, E=16, capacity 1: 4 tokens, 2 experts per device on 8, binding",
              32, 4, 16, 3, 1, skew=6.0),
        _make(rng, "T=32, E=16, capacity 0: every choice dropped", 32, 4, 16, 3, 0, skew=6.0),
        _make(rng, "T=16, E=16, capacity 4: room for every choice", 16, 3, 16, 2, 4),
        tied,
        _make(rng, "T=8, E=8, capacity 1: one token per device on 8", 8, 3, 8, 2, 1, skew=4.0),
        _make(rng, "T=12, E=6, capacity 2: 6 of 8 devices", 12, 3, 6, 2, 2, skew=4.0),
        _make(rng, "T=5, E=3, capacity 2: gcd 1, one device", 5, 3, 3, 2, 2),
    ]  # fmt: skip


def _empty_buffers(args: tuple[Any, ...]) -> str | None:
    """Why a case's compiled program cannot show the all-to-alls: capacity 0.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.moe_top2 import _empty_buffers
      >>> print(_empty_buffers((None, None, None, 0)))
      capacity 0: the (E, 0, D) buffers are empty and XLA drops their all-to-alls from the compiled program, so they are asked of the program JAX traced
      >>> _empty_buffers((None, None, None, 1)) is None
      True
    """
    if int(args[3]) != 0:
        return None
    return (
        "capacity 0: the (E, 0, D) buffers are empty and XLA drops their all-to-alls from "
        "the compiled program, so they are asked of the program JAX traced"
    )


TECHNIQUE = Technique(
    collectives=(("all-to-all",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "the tokens and the experts must stay split over 'expert': gathering x or w "
            "whole is what expert parallelism avoids (send each expert its slots with "
            "jax.lax.all_to_all, and the results back with another)",
            at_least=lambda args: (
                min(np.size(args[0]), np.size(args[2])) * np.dtype(args[0].dtype).itemsize
            ),
        ),
    ),
    axis="expert",
    traced=_empty_buffers,
    stays=Stays(
        (2,),
        "w (the experts)",
        (
            "the experts never leave their devices: the tokens travel to them (one all-to-all) "
            "and their results back (another)"
        ),
    ),
)
"""What a solution must do besides computing the right values."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """Two all-to-alls of ``(E, capacity, ·)`` buffers, and an all-reduce of ``2 E`` numbers.

    Each device keeps ``1 / n`` of each buffer and sends the rest: the dispatch's
    ``D`` features and the return's ``F`` results per slot; and ``aux``'s sums, the
    first-choice counts and the probabilities, ``2 E`` numbers all-reduced
    (``2 (n - 1) / n`` of their bytes, the ring's figure).

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.moe_top2 import _limits
      >>> ones = np.ones((16, 8), np.float32)
      >>> n = min(jax.device_count(), 8)
      >>> _limits((ones[:, :4], ones, np.ones((8, 4, 3), np.float32), 2))["sent"] == (n - 1) / n * (8 * 2 * (4 + 3) + 2 * 2 * 8) * 4
      True
    """
    x, logits, w, capacity = args
    (_, d), (experts, _, f) = np.shape(x), np.shape(w)
    n = _contract_devices(args, jax.device_count())
    slots = experts * int(capacity)
    buffers = slots * (
        d * bytes_per_number(x.dtype) + f * bytes_per_number(jnp.result_type(x.dtype, w.dtype))
    )
    sums = 2 * (2 * experts) * bytes_per_number(logits.dtype)
    return {"sent": (n - 1) / n * (buffers + sums)}


BUDGET = Budget(
    _limits,
    "the dispatch and the return each send (n - 1) / n of an (E, capacity, ·) buffer, "
    "and aux needs an all-reduce of 2 E numbers (the first-choice counts and the summed "
    "probabilities); buffers of T / n slots, or gathering the tokens, send more",
)
"""What a solution may send per device."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x, logits = np.ones((4, 2), np.float32), np.ones((4, 2), np.float32)
    w = np.ones((2, 2, 3), np.float32)
    return [
        Case("x a list, not an array", (x.tolist(), logits, w, 1), raises="TypeError"),
        Case("int32 x: not floating-point", (x.astype(np.int32), logits, w, 1), raises="TypeError"),
        Case("capacity 1.5", (x, logits, w, 1.5), raises="TypeError"),
        Case("capacity a string ('2')", (x, logits, w, "2"), raises="TypeError"),
        Case("a 2-D w: no expert axis", (x, logits, w[0], 1), raises="ValueError"),
        Case("router logits of 3 rows, x of 4", (x, logits[:3], w, 1), raises="ValueError"),
        Case("no tokens (T = 0)", (x[:0], logits[:0], w, 1), raises="ValueError"),
        Case("one expert (E = 1)", (x, logits[:, :1], w[:1], 1), raises="ValueError"),
        Case("no outputs (F = 0)", (x, logits, w[:, :, :0], 1), raises="ValueError"),
        Case("capacity -1", (x, logits, w, -1), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="moe_top2",
    title="Top-2 mixture of experts with a capacity",
    reference=moe_top2,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=unsharded,
    rtol=1e-5,
    atol=1e-4,  # float32 dot products and sums of up to 32 terms, in another order
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
        'from shard_tutorial import axis_mesh  # axis_mesh("expert", length): a 1-D mesh',
    ),
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=(Placement(axis=0, spec='P("expert")'), Placement(axis=None)),
    make_refusals=_refusals,
    folder="scale",
    outputs=("y", "aux"),
    arrange=_arrange,
    budget=BUDGET,
    oracle_devices=True,
)
