"""Problem "Expert-parallel mixture of experts": tokens sent to their expert's device and back.

A mixture-of-experts layer has many feed-forward networks (the experts) and a
router that picks one of them for each token (top-1: the expert whose router
logit is the largest). Expert parallelism splits the experts over the devices of
an ``"expert"`` mesh axis, and the tokens too: a token's expert is usually on
another device. So each device sends each of its tokens to the device that holds
the token's expert (the *dispatch*, one all-to-all), every device runs its own
experts on the tokens it received, and a second all-to-all brings every result
back to the device its token came from (the *return*), where it goes back into
the token's row. Neither the tokens nor the experts are ever gathered whole.
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
from shard_tutorial.validation import check_array, check_moe_shapes

__all__ = ["PROBLEM", "expert_parallel_moe"]


def expert_parallel_moe(x: jax.Array, router_logits: jax.Array, w: jax.Array) -> jax.Array:
    """Top-1 mixture of experts, ``x[t] @ w[argmax(router_logits[t])]``, experts split over devices.

    The mesh is ``axis_mesh("expert", math.gcd(T, E))``: one axis, ``"expert"``,
    with the most devices ``n`` (up to all of them) that divide both the number
    of tokens ``T`` and the number of experts ``E``. The rows of ``x`` and of
    ``router_logits`` (the tokens) are split over ``"expert"``, ``T / n`` per
    device, and so are the experts, ``E / n`` consecutive ones per device:
    expert ``e`` is on device ``e // (E / n)``. Each token goes to the one
    expert with the largest router logit (the first on ties), and no token is
    dropped: every row of the result is its token's expert's output.

    This problem practises expert parallelism with ``jax.shard_map`` and two
    ``jax.lax.all_to_all``: one sends each token to the device of its expert
    (the dispatch), the other sends the results back (the return), and neither
    ``x`` nor ``w`` is ever gathered whole. Each device sends every device a
    buffer of ``T / n`` slots (room for all of its tokens, as they may all
    choose that device), with each token's choice among that device's
    experts; the checker's budget allows the bytes of those two all-to-alls.

    ``T`` may be 0 (an empty result, on the mesh); ``D``, ``E`` and ``F`` are at
    least 1.

    How the arguments arrive: placed on the Explicit mesh ``axis_mesh("expert",
    math.gcd(T, E))``, ``x``, ``router_logits`` and ``w`` each as ``P("expert")``.

    Args:
      x: the tokens, shape (T, D).
      router_logits: the router's score of each expert for each token, shape
        (T, E), real numbers.
      w: the experts' weights, shape (E, D, F): expert ``e`` maps a token to
        ``x[t] @ w[e]``.

    Returns:
      Shape (T, F): row ``t`` is ``x[t] @ w[argmax(router_logits[t])]``, the
      rows split over ``"expert"`` (``P("expert")``).

    Raises:
      TypeError: for a non-array or a non-numeric dtype, or complex router logits.
      ValueError: for a wrong rank, shapes that do not fit together, or no experts,
        no features or no outputs.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import expert_parallel_moe
      >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> logits = jnp.array([[0.1, 0.9], [0.8, 0.2]])  # token 0: expert 1, token 1: expert 0
      >>> w = jnp.array([[[1.0], [0.0]], [[0.0], [1.0]]])  # expert 0 keeps x[0], expert 1 x[1]
      >>> expert_parallel_moe(x, logits, w)
      Array([[2.],
             [3.]], dtype=float32)

      On 8 devices, 16 tokens and 8 experts: 2 tokens and one expert per device.

      >>> out = expert_parallel_moe(jnp.ones((16, 4)), jnp.eye(16, 8), jnp.ones((8, 4, 3)))
      >>> dict(out.sharding.mesh.shape), tuple(out.sharding.spec), out.shape
      ({'expert': 8}, ('expert', None), (16, 3))
    """
    _check_inputs(x, router_logits, w)
    tokens, experts = x.shape[0], w.shape[0]
    traced = any(isinstance(a, jax.core.Tracer) for a in (x, router_logits, w))
    mesh = axis_mesh("expert", math.gcd(tokens, experts), traced=traced)
    split = NamedSharding(mesh, P("expert"))  # rows (tokens) or experts over "expert"
    if tokens == 0:  # nothing to send (jax 0.10 cannot exchange empty blocks)
        dtype = jnp.result_type(x.dtype, w.dtype)
        return place(jnp.zeros((0, w.shape[2]), dtype), split)
    x, router_logits, w = place((x, router_logits, w), split)
    return _moe(mesh)(x, router_logits, w)


def _check_inputs(x: object, router_logits: object, w: object) -> None:
    check_array(x, "x", ndim=2, layout="of shape (T, D)")
    check_array(router_logits, "router_logits", ndim=2, layout="of shape (T, E)")
    check_array(w, "w", ndim=3, layout="of shape (E, D, F)")
    if jnp.issubdtype(router_logits.dtype, jnp.complexfloating):  # type: ignore[attr-defined]
        msg = (
            "router_logits must hold real numbers (argmax compares them), got dtype "
            f"{router_logits.dtype}"  # type: ignore[attr-defined]
        )
        raise TypeError(msg)
    _, d, experts, f = check_moe_shapes(x, router_logits, w)
    if min(d, experts, f) == 0:
        msg = f"D, E and F must be at least 1, got x {np.shape(x)} and w {np.shape(w)}"
        raise ValueError(msg)


def _dispatch_compute_return(x: jax.Array, logits: jax.Array, w: jax.Array) -> jax.Array:
    """One device: its tokens to their experts' devices, its experts, the results back."""
    devices = jax.lax.axis_size("expert")
    local_experts, features = w.shape[0], x.shape[1]  # E / n experts here, D features
    expert = jnp.argmax(logits, axis=1)  # each token's expert (the first on ties)
    device = expert // local_experts  # the device that holds it
    # Dispatch: a buffer of T / n slots for each device. Slot t of buffer j holds
    # token t if its expert is on device j (zeros otherwise), with its choice
    # among device j's experts, one-hot.
    choice = jax.nn.one_hot(expert % local_experts, local_experts, dtype=x.dtype)
    message = jnp.concatenate([x, choice], axis=1)  # (T/n, D + E/n)
    to_device = device[None, :] == jnp.arange(devices)[:, None]  # (n, T/n)
    outbox = jnp.where(to_device[:, :, None], message[None], 0)  # (n, T/n, D + E/n)
    # Buffer j goes to device j; inbox[s] is what device s sent here.
    inbox = jax.lax.all_to_all(outbox, "expert", split_axis=0, concat_axis=0, tiled=True)
    tokens, chosen = inbox[..., :features], inbox[..., features:]
    # Each local expert on every received slot, kept where the slot chose it.
    every_expert = jnp.einsum("std,edf->stef", tokens, w)  # (n, T/n, E/n, F)
    kept = jnp.where(chosen[..., None] > 0, every_expert, 0)
    results = jnp.sum(kept, axis=2, dtype=kept.dtype)  # (n, T/n, F); small ints stay small
    # Return: results[s] goes back to device s; back[j] came from device j.
    back = jax.lax.all_to_all(results, "expert", split_axis=0, concat_axis=0, tiled=True)
    return back[device, jnp.arange(x.shape[0])]  # each token's result, from its expert's device


@functools.cache
def _moe(mesh: Mesh) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    """Build, once per mesh, the compiled expert-parallel layer."""
    return jax.jit(
        jax.shard_map(
            _dispatch_compute_return,
            mesh=mesh,
            in_specs=(P("expert"), P("expert"), P("expert")),  # tokens, their logits, experts
            out_specs=P("expert"),  # each token's result on its own device
        )
    )


def _unsharded(x: jax.Array, router_logits: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.einsum("td,tdf->tf", x, w[jnp.argmax(router_logits, axis=1)])


def _oracle(x: np.ndarray, router_logits: np.ndarray, w: np.ndarray) -> np.ndarray:
    expert = np.argmax(precise(router_logits), axis=1)  # the first index on ties
    return np.einsum("td,tdf->tf", precise(x), precise(w)[expert])


def _contract_devices(args: tuple[Any, ...], devices: int) -> int:
    x, _, w = args
    return usable_device_count(math.gcd(np.shape(x)[0], np.shape(w)[0]), devices)


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: the most devices that divide both T and E."""
    return (_contract_devices(args, devices),)


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as the contract says they arrive: tokens and experts over ``"expert"``."""
    x, logits, w = args
    mesh = axis_mesh("expert", math.gcd(np.shape(x)[0], np.shape(w)[0]))
    return place((x, logits, w), NamedSharding(mesh, P("expert")))


def local_argmax(x: np.ndarray, logits: np.ndarray, w: np.ndarray, devices: int) -> np.ndarray:
    """Each token sent to the best expert *on its own device*: the mistake of no dispatch.

    Args:
      x: the tokens, (T, D).
      logits: the router logits, (T, E).
      w: the experts, (E, D, F).
      devices: the device count ``n`` (dividing T and E).

    Returns:
      Row t: ``x[t] @ w[e]`` with ``e`` the best of the ``E / n`` experts on
      token t's device.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.expert_parallel_moe import local_argmax
      >>> w = np.arange(4.0).reshape(4, 1, 1)  # expert e multiplies by e
      >>> logits = np.array([[0, 0, 0, 9], [9, 0, 0, 0]])  # token 0 wants 3, token 1 wants 0
      >>> local_argmax(np.ones((2, 1)), logits, w, 2)[:, 0]  # each takes its device's best
      array([0., 2.])
    """
    tokens, experts = logits.shape
    per_device, local = tokens // devices, experts // devices
    device = np.arange(tokens) // per_device
    own = np.stack([logits[t, d * local : (d + 1) * local] for t, d in enumerate(device)])
    expert = device * local + np.argmax(own, axis=1)
    return np.einsum("td,tdf->tf", precise(x), precise(w)[expert])


def round_robin(x: np.ndarray, logits: np.ndarray, w: np.ndarray, devices: int) -> np.ndarray:
    """Experts looked for as if dealt round-robin: the mistake of the wrong owner.

    ``w`` split over ``"expert"`` gives device ``d`` the consecutive experts
    ``d * E / n`` to ``(d + 1) * E / n - 1``. Code that sends expert ``e``'s tokens to
    device ``e % n`` and reads its local expert ``e // n`` (as if expert ``e`` sat on
    device ``e % n``) multiplies by expert ``(e % n) * E / n + e // n`` instead.

    Args:
      x: the tokens, (T, D).
      logits: the router logits, (T, E).
      w: the experts, (E, D, F).
      devices: the device count ``n`` (dividing T and E).

    Returns:
      Row t: ``x[t] @ w[(e % n) * E / n + e // n]`` with ``e`` token t's expert.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.expert_parallel_moe import round_robin
      >>> w = np.arange(4.0).reshape(4, 1, 1)  # expert e multiplies by e
      >>> logits = np.eye(4)  # token t wants expert t
      >>> round_robin(np.ones((4, 1)), logits, w, 2)[:, 0]  # 2 devices, experts 0-1 and 2-3
      array([0., 2., 1., 3.])
    """
    experts = logits.shape[1]
    wanted = np.argmax(precise(logits), axis=1)
    used = (wanted % devices) * (experts // devices) + wanted // devices
    return np.einsum("td,tdf->tf", precise(x), precise(w)[used])


def no_return(x: np.ndarray, logits: np.ndarray, w: np.ndarray, devices: int) -> np.ndarray:
    """Each device's results left where they were computed: the mistake of no return trip.

    Slot t of device j's rows holds the sum, over the devices that sent one, of
    the results of the tokens in slot t that chose one of device j's experts (a
    reader's ``results.sum(axis=0)`` without the second all-to-all).

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.expert_parallel_moe import no_return
      >>> w = np.arange(1.0, 3.0).reshape(2, 1, 1)  # expert 0: x 1, expert 1: x 2
      >>> logits = np.array([[0, 9], [9, 0]])  # token 0 (device 0) to expert 1 (device 1)...
      >>> no_return(np.array([[10.0], [20.0]]), logits, w, 2)[:, 0]  # ...and back: swapped
      array([20., 20.])
    """
    tokens, experts = logits.shape
    per_device, local = tokens // devices, experts // devices
    expert = np.argmax(precise(logits), axis=1)
    results = np.einsum("td,tdf->tf", precise(x), precise(w)[expert])
    out = np.zeros_like(results)
    for t in range(tokens):
        out[(expert[t] // local) * per_device + t % per_device] += results[t]
    return out


def _explain(case: Case, expected: np.ndarray, received: np.ndarray) -> str | None:
    """Recognise the classic expert-parallel mistakes in a wrong output.

    - the router's argmax taken over the token's own device's experts only;
    - experts looked for on device ``e % n`` (dealt round-robin), not ``e // (E / n)``;
    - no return all-to-all: the results left on the experts' devices;
    - tokens dropped (their rows are zeros), as a too-small capacity does.
    """
    x, logits, w = (np.asarray(a) for a in case.args)
    got = precise(np.asarray(received))
    want = precise(np.asarray(expected))
    if got.shape != want.shape or got.size == 0:
        return None

    def close(a: np.ndarray, b: np.ndarray) -> bool:
        scale = 1 + np.abs(b).max(initial=0)
        return bool(np.allclose(a, b, rtol=1e-3, atol=1e-4 * scale))

    tokens, experts = logits.shape
    for devices in device_counts(math.gcd(tokens, experts)):
        if close(got, local_argmax(x, logits, w, devices)):
            return (
                f"Each token went to the best expert on its own device (of the {experts // devices} "
                f"there, on {devices} devices), not to the best of all {experts}: the router's "
                "argmax is over every expert, and a token whose expert lives on another device "
                'must be sent there (jax.lax.all_to_all over "expert")'
            )
        if experts // devices > 1 and close(got, round_robin(x, logits, w, devices)):
            return (
                f"Each token was multiplied by expert (e % {devices}) * {experts // devices} "
                f"+ e // {devices} instead of its expert e: the code looked for expert e on "
                f"device e % {devices}, as if the experts had been dealt round-robin. "
                f'Splitting w over "expert" gives each device consecutive experts: expert e '
                f"is on device e // {experts // devices} (E / n = {experts // devices} each), "
                f"as its local expert e % {experts // devices}"
            )
        if close(got, no_return(x, logits, w, devices)):
            return (
                f"The results stayed on the devices of the experts that computed them ({devices} "
                "devices): each row holds what arrived in that slot from the other devices, not "
                "its own token's result. A second jax.lax.all_to_all must send every result "
                "back to the device its token came from, into the token's row"
            )
    zero = np.all(got == 0, axis=1) & ~np.all(want == 0, axis=1)
    if zero.any() and close(got[~zero], want[~zero]):
        return (
            f"{int(zero.sum())} of the {tokens} tokens were dropped: their rows are zeros and "
            "every other row is right, as when a device's buffer for another device has fewer "
            "slots than the tokens that chose it. No token may be dropped: give each "
            "destination T / n slots, room for every local token"
        )
    return None


def _generate(rng: np.random.Generator) -> Case:
    """One random case: up to 8 devices' worth of tokens and experts, a few features."""
    n = int(rng.integers(1, 9))
    tokens, experts = n * int(rng.integers(1, 5)), n * int(rng.integers(1, 3))
    d, f = int(rng.integers(1, 7)), int(rng.integers(1, 5))
    return _case(rng, f"random: T={tokens}, D={d}, E={experts}, F={f}", tokens, d, experts, f)


def _case(rng: np.random.Generator, label: str, tokens: int, d: int, experts: int, f: int) -> Case:
    return Case(
        label,
        (
            rng.normal(size=(tokens, d)).astype(np.float32),
            rng.normal(size=(tokens, experts)).astype(np.float32),
            rng.normal(size=(experts, d, f)).astype(np.float32),
        ),
    )


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261126)

    def case(label: str, tokens: int, d: int, experts: int, f: int) -> Case:
        return _case(rng, label, tokens, d, experts, f)

    example = Case(
        "example from the problem statement",
        (
            np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
            np.array([[0.1, 0.9], [0.8, 0.2]], np.float32),
            np.array([[[1.0], [0.0]], [[0.0], [1.0]]], np.float32),
        ),
    )
    # Every token of every device chooses expert 0, on device 0: a buffer with fewer
    # than T / n slots for device 0 drops tokens.
    skewed = case("T=32, E=8: every token chooses expert 0", 32, 4, 8, 3)
    skewed_logits = np.zeros((32, 8), np.float32)
    skewed_logits[:, 0] = 1.0
    skewed = Case(skewed.label, (skewed.args[0], skewed_logits, skewed.args[2]))
    # Ties: the first of the equal logits wins (np.argmax and jnp.argmax agree).
    tied = case("T=16, E=8: ties go to the first expert", 16, 3, 8, 2)
    tied_logits = np.repeat(np.array([[0, 2, 2, 0, 1, 1, 2, 2]], np.float32), 16, axis=0)
    tied_logits[8:] = np.roll(tied_logits[8:], 3, axis=1)
    tied = Case(tied.label, (tied.args[0], tied_logits, tied.args[2]))
    return [
        example,
        case("T=16, D=4, E=8, F=3: one expert per device on 8", 16, 4, 8, 3),
        case("T=24, E=16: two experts per device on 8", 24, 5, 16, 2),
        skewed,
        tied,
        case("T=12, E=6: 6 of 8 devices", 12, 3, 6, 4),
        case("T=6, E=4: 2 devices", 6, 2, 4, 3),
        case("T=5, E=3: gcd 1, one device", 5, 3, 3, 2),
        case("T=64, D=16, E=32, F=8", 64, 16, 32, 8),
        # The rest of the contract: no tokens at all, integers, and mixed floats (the
        # result in the dtype of x @ w).
        _retyped(case("T=0: no tokens, an empty result", 0, 3, 8, 2)),
        _retyped(case("int32 tokens and experts", 16, 3, 8, 2), np.int32, np.int32),
        _retyped(case("bfloat16 tokens, float32 experts", 16, 4, 8, 3), jnp.bfloat16),
    ]


def _retyped(case: Case, x_dtype: Any = np.float32, w_dtype: Any = np.float32) -> Case:
    """``case`` with ``x`` and ``w`` in the given dtypes (integers: rounded to -3..3)."""
    x, logits, w = case.args
    if np.issubdtype(np.dtype(x_dtype), np.integer):
        x, w = np.clip(np.round(x * 2), -3, 3), np.clip(np.round(w * 2), -3, 3)
    return Case(case.label, (x.astype(x_dtype), logits, w.astype(w_dtype)))


TECHNIQUE = Technique(
    collectives=(("all-to-all",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "the tokens and the experts must stay split over 'expert': gathering x or w "
            "whole is what expert parallelism avoids (send each token to its expert's "
            "device with jax.lax.all_to_all, and back with another)",
            at_least=lambda args: (
                min(np.size(args[0]), np.size(args[2])) * np.dtype(args[0].dtype).itemsize
            ),
        ),
        Forbidden(
            "all-reduce",
            "each token's result comes back from its expert's device by the return "
            "all-to-all; adding up the devices' outputs (psum) sends every row to every device",
        ),
    ),
    axis="expert",
    stays=Stays(
        (2,),
        "w (the experts)",
        (
            "the experts never leave their devices: the tokens travel to them (one all-to-all) "
            "and their results back (another)"
        ),
    ),
)
"""What a solution must do besides computing the right values (the statement's
"This problem practises" paragraph says it in words)."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """The two all-to-alls of buffers of T / n slots: the dispatch and the return.

    Each of the ``n`` devices sends each other device ``T / n`` slots: on the
    way there a token's ``D`` features and its choice among that device's
    ``E / n`` experts (one-hot in x's dtype, or one int32 id, whichever is
    larger), on the way back ``F`` results.

    Examples:
      >>> import jax, numpy as np
      >>> x, logits, w = np.ones((16, 4), np.float32), np.ones((16, 8)), np.ones((8, 4, 3))
      >>> n = jax.device_count()  # 16 tokens, 8 experts: 16 / n slots of 4 + 8 / n + 3 numbers
      >>> _limits((x, logits, w.astype(np.float32)))["sent"] == (n - 1) * 16 // n * (4 + max(8 // n, 1) + 3) * 4
      True
    """
    x, _, w = args
    (tokens, d), (experts, _, f) = np.shape(x), np.shape(w)
    n = _contract_devices(args, jax.device_count())
    item = bytes_per_number(x.dtype)
    out_item = bytes_per_number(jnp.result_type(x.dtype, w.dtype))
    per_slot = d * item + max((experts // n) * item, 4) + f * out_item
    return {"sent": (n - 1) * (tokens // n) * per_slot}


BUDGET = Budget(
    _limits,
    "the dispatch and the return each send every other device T / n slots (a token's "
    "features and its choice of expert there; its results back); a buffer per expert "
    "instead of per device, or gathering the tokens, sends more",
)
"""What a solution may send per device: the two all-to-alls of T / n slots per device."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x, logits = np.ones((4, 2), np.float32), np.ones((4, 2), np.float32)
    w = np.ones((2, 2, 3), np.float32)
    return [
        Case("x a list, not an array", (x.tolist(), logits, w), raises="TypeError"),
        Case("a bool x: not numeric", (x > 0, logits, w), raises="TypeError"),
        Case("complex router logits", (x, logits.astype(np.complex64), w), raises="TypeError"),
        Case("a 2-D w: no expert axis", (x, logits, w[0]), raises="ValueError"),
        Case("router logits of 3 rows, x of 4", (x, logits[:3], w), raises="ValueError"),
        Case("no experts (E = 0)", (x, logits[:, :0], w[:0]), raises="ValueError"),
        Case("no features (D = 0)", (x[:, :0], logits, w[:, :0]), raises="ValueError"),
        Case("no outputs (F = 0)", (x, logits, w[:, :, :0]), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="expert_parallel_moe",
    title="Expert-parallel mixture of experts",
    reference=expert_parallel_moe,
    oracle=_oracle,
    make_cases=_cases,
    unsharded=_unsharded,
    rtol=1e-5,
    atol=1e-4,  # float32 dot products of up to 16 terms, in another order than NumPy's
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
    placement=Placement(axis=0, spec='P("expert")'),
    make_refusals=_refusals,
    folder="parallelism",
    arrange=_arrange,
    budget=BUDGET,
)
