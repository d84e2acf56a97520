"""Problem "Pipeline-parallel training step": the 1F1B schedule, forward and backward.

Part V's pipeline ran the forward pass alone. Training runs each microbatch's
backward pass too, through the stages in reverse: the gradient of the loss with
respect to a stage's output goes from stage ``s + 1`` back to stage ``s``
(:func:`jax.lax.ppermute` the other way), and each stage adds up the gradient of its
own layers, which never leave it. A backward step needs what its forward step saw,
so a stage keeps each microbatch's activations from its forward to its backward.
GPipe runs every forward, then every backward: a stage keeps all ``M``
microbatches' activations at once. 1F1B (PipeDream-Flush, Narayanan et al., 2019
and 2021) starts a microbatch's backward as soon as it can: once its pipeline is
full, a stage alternates one forward and one backward, so it keeps at most ``n``
microbatches, whatever ``M``; the bubble is GPipe's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.meshes import axis_mesh, device_counts, place, usable_device_count
from shard_tutorial.pipeline_schedules import Schedule, Step, schedule
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
from shard_tutorial.validation import check_array, check_floating

__all__ = [
    "PROBLEM",
    "oracle",
    "pipeline_train_step",
    "scheduled_train_step",
    "tick_tables",
    "unsharded",
]


def pipeline_train_step(x: jax.Array, y: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The loss of a deep tanh network and its gradient, pipelined over ``"stage"`` with 1F1B.

    Each microbatch ``x[m]`` goes through ``h = tanh(h @ w[l])`` for ``l = 0 ..
    L - 1``, and the loss is ``mean((h_L - y) ** 2)`` over every microbatch, row
    and column. The mesh is ``axis_mesh("stage", L)``: ``n`` stages, the most
    devices (up to 8) that divide ``L``, each holding ``L / n`` consecutive layers
    (``w`` split as ``P("stage")``). The step returns the loss and ``jax.grad`` of
    it with respect to ``w``.

    This problem practises pipeline-parallel training with ``jax.shard_map`` and
    the 1F1B schedule: activations go forward and their gradients back between
    neighbouring stages with ``jax.lax.ppermute``, a stage's layers and their
    gradients never leave it, and once its pipeline is full a stage alternates one
    forward and one backward, so it keeps what the backward steps need of at most
    ``n`` microbatches at once, not ``M``: keep them in ``n`` slots (microbatch ``m``
    in slot ``m % n``). The checker reads, from XLA's memory analysis of every
    program of the call and the arrays the call keeps between them, the most
    bytes a device holds, and calls the answer again with ``2n`` more
    microbatches: from ``M = 4n`` on, what a device holds may grow by ``x``'s
    and ``y``'s new microbatches and a longer schedule, not by activations kept
    for every microbatch (GPipe's order, every forward then every backward).

    How the arguments arrive: placed on the Explicit mesh ``axis_mesh("stage",
    L)``, ``x`` and ``y`` replicated (``P()``), ``w`` split by layers
    (``P("stage")``).

    Args:
      x: the inputs, shape (M, B, D): M >= 1 microbatches of B >= 1 rows of D >= 1
        features, floating-point.
      y: the targets, shape (M, B, D), floating-point.
      w: the layers, shape (L, D, D), L >= 1, floating-point.

    Returns:
      ``(loss, grad)``: the loss, a scalar every stage holds (``P()``), and its
      gradient with respect to ``w``, shape (L, D, D), split like ``w``
      (``P("stage")``); both in the dtype of ``tanh(x @ w[0]) - y``.

    Raises:
      TypeError: for a non-array, or numbers that are not floating-point.
      ValueError: for a wrong rank, an empty size, or shapes that do not fit
        together.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial import pipeline_train_step
      >>> x = jnp.array([[[0.5, -1.0]], [[2.0, 0.0]]])  # 2 microbatches of 1 row
      >>> y = jnp.zeros((2, 1, 2))
      >>> w = jnp.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])
      >>> loss, grad = pipeline_train_step(x, y, w)  # Part V's outputs, against 0
      >>> loss
      Array(0.28881478, dtype=float32)
      >>> grad.shape, grad.sharding.spec[0]  # split by layers, over "stage"
      ((2, 2, 2), 'stage')
    """
    _check_inputs(x, y, w)
    dtype = jnp.result_type(x, y, w)
    traced = any(isinstance(a, jax.core.Tracer) for a in (x, y, w))
    mesh = axis_mesh("stage", w.shape[0], traced=traced)
    x, y = place((jnp.asarray(x, dtype), jnp.asarray(y, dtype)), NamedSharding(mesh, P()))
    w = place(jnp.asarray(w, dtype), NamedSharding(mesh, P("stage")))  # L / n layers each
    forward, backward, slots = _tick_tables(mesh.shape["stage"], x.shape[0])  # 1F1B
    return _step(mesh, slots)(x, y, w, jnp.asarray(forward), jnp.asarray(backward))


def scheduled_train_step(
    x: jax.Array, y: jax.Array, w: jax.Array, kind: str = "1f1b", chunks: int = 1
) -> tuple[jax.Array, np.ndarray, Schedule, Callable[[], Any]]:
    """:func:`pipeline_train_step` on any of the classic schedules, and what each device ran.

    The same program as the reference's, with the tables of ``kind``
    (:func:`tick_tables`) and as many slots as that schedule keeps alive; each
    device also returns, per tick, the entries of the tables it ran, so the
    schedule is read from the program that ran. With ``chunks`` = ``v`` > 1
    (``"interleaved"``), device ``d`` holds the ``v`` chunks of layers of the
    virtual stages ``d, d + n, ...`` (``L / (n v)`` layers each).

    Args:
      x: the inputs, shape (M, B, D).
      y: the targets, shape (M, B, D).
      w: the layers, shape (L, D, D); ``n v`` must divide ``L``.
      kind: ``"gpipe"``, ``"1f1b"`` or ``"interleaved"``.
      chunks: ``v``, for ``"interleaved"``.

    Returns:
      ``(loss, grad, executed, compiled)``: the loss, its gradient (a NumPy
      array, in ``w``'s order of layers), the :class:`~shard_tutorial.pipeline_schedules.Schedule`
      the devices ran, and a function that returns the compiled program (its
      ``memory_analysis()`` says what a device holds).

    Examples:
      On 8 devices, 4 layers on 4 stages, 4 microbatches:

      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.pipeline_train_step import scheduled_train_step
      >>> x = jnp.ones((4, 1, 2))
      >>> *_, gpipe, _ = scheduled_train_step(x, x / 2, jnp.ones((4, 2, 2)) / 2, "gpipe")
      >>> gpipe.name, gpipe.span, gpipe.activations().tolist()
      ('GPipe (executed)', 14, [4.0, 4.0, 4.0, 4.0])
    """
    _check_inputs(x, y, w)
    dtype = jnp.result_type(x, y, w)
    layers = w.shape[0]
    mesh = axis_mesh("stage", layers)
    n = mesh.shape["stage"]
    if layers % (n * chunks):
        msg = f"{n} stages of {chunks} chunks must divide the {layers} layers of w"
        raise ValueError(msg)
    forward, backward, slots = tick_tables(n, x.shape[0], kind, chunks)
    # Device d's rows of w: its chunks' layers, the virtual stages d, d + n, ... in order.
    per = layers // (n * chunks)
    order = np.array(
        [(c * n + d) * per + j for d in range(n) for c in range(chunks) for j in range(per)]
    )
    x, y = place((jnp.asarray(x, dtype), jnp.asarray(y, dtype)), NamedSharding(mesh, P()))
    w = place(np.asarray(w).astype(dtype)[order], NamedSharding(mesh, P("stage")))
    args = (x, y, w, jnp.asarray(forward), jnp.asarray(backward))
    program: Any = _step(mesh, slots, chunks, record=True)  # jitted: it has .lower
    loss, grad, ran = program(*args)
    grad = np.asarray(grad)[np.argsort(order)]  # back in w's order
    ran = np.asarray(ran)  # (devices, ticks, 2): forward and backward entries
    steps = tuple(
        Step(d, t, kind_, int(e) // chunks, int(e) % chunks)
        for d in range(n)
        for t in range(ran.shape[1])
        for kind_, e in (("F", ran[d, t, 0]), ("B", ran[d, t, 1]))
        if e >= 0
    )
    names = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": f"interleaved 1F1B (v={chunks})"}
    executed = Schedule(f"{names[kind]} (executed)", n, x.shape[0], chunks, steps)
    return loss, grad, executed, lambda: program.lower(*args).compile()


def tick_tables(
    stages: int, microbatches: int, kind: str = "1f1b", chunks: int = 1
) -> tuple[np.ndarray, np.ndarray, int]:
    """A pipeline schedule as two tables, and the slots that hold what it keeps.

    Worked out by :func:`shard_tutorial.pipeline_schedules.schedule` (each step
    one tick, a device's steps in the schedule's order, each as soon as its input
    is ready).

    Args:
      stages: ``n`` >= 1 devices.
      microbatches: ``M`` >= 1.
      kind: ``"gpipe"``, ``"1f1b"`` or ``"interleaved"``.
      chunks: chunks of layers per device, ``v`` (interleaved: 2 or more).

    Returns:
      ``(forward, backward, slots)``: int32 arrays of shape (ticks, stages),
      ``m * v + c`` where device ``s`` runs microbatch ``m`` on its chunk ``c``
      forward (backward) at tick ``t``, or -1; and how many slots per chunk hold
      each microbatch's input (and its output's gradient) from its arrival to its
      backward step when microbatch ``m`` takes slot ``m % slots``: ``n`` for
      1F1B, ``M`` for GPipe.

    Examples:
      >>> from shard_tutorial.problems.pipeline_train_step import tick_tables
      >>> forward, backward, slots = tick_tables(2, 2)
      >>> forward.T.tolist(), slots
      ([[0, 1, -1, -1, -1, -1], [-1, 0, -1, 1, -1, -1]], 2)
      >>> backward.T.tolist()
      [[-1, -1, -1, 0, -1, 1], [-1, -1, 0, -1, 1, -1]]
      >>> [tick_tables(4, 16, kind)[2] for kind in ("gpipe", "1f1b")]
      [16, 4]
    """
    return _tick_tables(stages, microbatches, kind, chunks)


def _tick_tables(
    stages: int, microbatches: int, kind: str = "1f1b", chunks: int = 1
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`tick_tables`' work: the schedule's steps written into two tables."""
    plan = schedule(kind, stages, microbatches, chunks)
    forward = np.full((plan.span, stages), -1, np.int32)
    backward = np.full((plan.span, stages), -1, np.int32)
    for step in plan.steps:
        table = forward if step.kind == "F" else backward
        table[step.start, step.device] = step.microbatch * chunks + step.chunk
    return forward, backward, _slots(plan)


def _slots(plan: Schedule) -> int:
    """The fewest slots per chunk where each microbatch's saved values never meet another's.

    Microbatch ``m`` takes slot ``m % slots``; its values live from their arrival
    (the end of the sender's tick; for the first chunk of all, its own forward) to
    its backward step.
    """
    n, v = plan.devices, plan.chunks
    at = {(s.kind, s.microbatch, s.chunk * n + s.device): s.start for s in plan.steps}
    lives: dict[tuple[int, int], list[tuple[int, float, float]]] = {}
    for s in plan.steps:
        if s.kind != "B":
            continue
        stage = s.chunk * n + s.device
        start = at[("F", s.microbatch, stage - 1)] + 0.9 if stage else at[("F", s.microbatch, 0)]
        if stage < n * v - 1:  # the gradient that arrives from the stage after
            start = min(start, at[("B", s.microbatch, stage + 1)] + 0.9)
        lives.setdefault((s.device, s.chunk), []).append((s.microbatch, start, s.start + 0.5))
    for slots in range(1, plan.microbatches + 1):
        if all(
            not (a[0] % slots == b[0] % slots and a[1] < b[2] and b[1] < a[2])
            for spans in lives.values()
            for i, a in enumerate(spans)
            for b in spans[i + 1 :]
        ):
            return slots
    return plan.microbatches


def _layers(h: jax.Array, w_block: jax.Array) -> jax.Array:
    """This stage's layers, in order: ``h = tanh(h @ w)`` for each of its ``L / n``."""
    for w in w_block:  # a few layers: unrolled
        h = jnp.tanh(h @ w)
    return h


def _stage(
    x: jax.Array,
    y: jax.Array,
    w_block: jax.Array,
    forward: jax.Array,
    backward: jax.Array,
    *,
    slots: int,
    chunks: int = 1,
    record: bool = False,
) -> Any:
    """One device: the schedule's ticks, then the last stage's loss to every device.

    ``w_block`` holds the device's ``chunks`` chunks of layers, one after the
    other. Slot ``m % slots`` of a chunk's ``inputs`` holds microbatch ``m``'s
    input to it from its arrival to its backward step (which recomputes the
    chunk's layers from it, with ``jax.vjp``); the same slot of ``grads_in`` the
    gradient of its output, from its arrival to the same step. Activations go to
    the next device and gradients back; with several chunks the last device sends
    on to device 0's next chunk (and device 0 back to the last device's previous
    one). With ``record``, each device also returns, per tick, what it ran
    forward and backward (its row of the tables, as the program read it).
    """
    stage = jax.lax.axis_index("stage")
    n = forward.shape[1]
    v = chunks
    w_chunks = w_block.reshape(v, -1, *w_block.shape[1:])
    scale = 2.0 / x.size  # d mean((h - y) ** 2) / dh = 2 (h - y) / (M B D)
    ring = v > 1  # the last device's output goes on to device 0's next chunk
    to_next = [(i, (i + 1) % n) for i in range(n if ring else n - 1)]
    to_prev = [((i + 1) % n, i) for i in range(n if ring else n - 1)]
    # Each device's own values (varying over "stage", as the ticks make them).
    slots_, loss = jax.lax.pcast(
        (jnp.zeros((v, slots, *x.shape[1:]), x.dtype), jnp.zeros((), x.dtype)),
        "stage",
        to="varying",
    )
    carry = (slots_, slots_, jnp.zeros_like(w_chunks), loss)

    def tick(carry: Any, table: Any) -> tuple[Any, Any]:
        inputs, grads_in, grad, loss = carry
        f_row, b_row = table
        f, b = f_row[stage], b_row[stage]
        # Forward: the first chunk of all reads x, the others what arrived.
        fm, fc = jnp.maximum(f, 0) // v, jnp.maximum(f, 0) % v
        h = jnp.where((stage == 0) & (fc == 0), x[fm], inputs[fc, fm % slots])
        inputs = jnp.where(f >= 0, inputs.at[fc, fm % slots].set(h), inputs)
        out = _layers(h, w_chunks[fc])
        # Backward: recompute the chunk from its saved input, pull the output's gradient
        # back (from the loss on the last chunk of all, else from the one after).
        bm, bc = jnp.maximum(b, 0) // v, jnp.maximum(b, 0) % v
        out_b, pull = jax.vjp(_layers, inputs[bc, bm % slots], w_chunks[bc])
        error = out_b - y[bm]
        last = (stage == n - 1) & (bc == v - 1)
        dh, dw = pull(jnp.where(last, scale * error, grads_in[bc, bm % slots]))
        doing = b >= 0
        grad = grad.at[bc].add(jnp.where(doing, dw, 0))
        loss = loss + jnp.where(doing & last, jnp.sum(error**2) / x.size, 0)
        # Send: the activation on, its gradient back; each kept in its microbatch's
        # slot, as the sender's entry of the table names it.
        if to_next:
            arrived = jax.lax.ppermute(out, "stage", to_next)
            came_back = jax.lax.ppermute(dh, "stage", to_prev)
            sent_f = f_row[(stage - 1) % n]
            chunk_f = sent_f % v + (stage == 0)  # from the last device: the next chunk
            keep_f = (sent_f >= 0) & (chunk_f < v) & ((stage > 0) | ring)
            at_f = (jnp.minimum(chunk_f, v - 1), jnp.maximum(sent_f, 0) // v % slots)
            inputs = jnp.where(keep_f, inputs.at[at_f].set(arrived), inputs)
            sent_b = b_row[(stage + 1) % n]
            chunk_b = sent_b % v - (stage == n - 1)  # from device 0: the chunk before
            keep_b = (sent_b >= 0) & (chunk_b >= 0) & ((stage < n - 1) | ring)
            at_b = (jnp.maximum(chunk_b, 0), jnp.maximum(sent_b, 0) // v % slots)
            grads_in = jnp.where(keep_b, grads_in.at[at_b].set(came_back), grads_in)
        return (inputs, grads_in, grad, loss), ((f, b) if record else None)

    (_, _, grad, loss), ran = jax.lax.scan(tick, carry, (forward, backward))
    loss = jax.lax.psum(loss, "stage")  # added up on the last stage only
    grad = grad.reshape(w_block.shape)
    return (loss, grad, jnp.stack(ran, axis=-1)[None]) if record else (loss, grad)


@functools.cache
def _step(mesh: Mesh, slots: int, chunks: int = 1, record: bool = False) -> Callable[..., Any]:
    """Build, once per mesh and schedule's shape, the compiled pipelined step."""
    per_device = functools.partial(_stage, slots=slots, chunks=chunks, record=record)
    return jax.jit(
        jax.shard_map(
            per_device,
            mesh=mesh,
            in_specs=(P(), P(), P("stage"), P(), P()),  # x, y whole; w's layers split
            # the loss on every stage; grad split like w (and what each device ran)
            out_specs=(P(), P("stage"), P("stage")) if record else (P(), P("stage")),
        )
    )


def _check_inputs(x: object, y: object, w: object) -> None:
    """Raise unless ``x``, ``y`` and ``w`` are floating-point arrays that fit together.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.pipeline_train_step import _check_inputs
      >>> _check_inputs(jnp.ones((2, 1, 3)), jnp.ones((2, 1, 3)), jnp.ones((4, 3, 3)))
      >>> _check_inputs(jnp.ones((2, 1, 3)), jnp.ones((2, 1, 2)), jnp.ones((4, 3, 3)))
      Traceback (most recent call last):
      ...
      ValueError: y must have x's shape (M, B, D) = (2, 1, 3), got (2, 1, 2)
    """
    check_array(x, "x", ndim=3, layout="of shape (M, B, D)")
    check_array(y, "y", ndim=3, layout="of shape (M, B, D)")
    check_array(w, "w", ndim=3, layout="of shape (L, D, D)")
    for value, name in ((x, "x"), (y, "y"), (w, "w")):
        check_floating(value, name)  # type: ignore[arg-type]
    (m, b, d), (layers, d_in, d_out) = np.shape(x), np.shape(w)
    if min(m, b, d) < 1:
        msg = f"x must have at least one microbatch, row and feature, got shape {(m, b, d)}"
        raise ValueError(msg)
    if np.shape(y) != (m, b, d):
        msg = f"y must have x's shape (M, B, D) = {(m, b, d)}, got {np.shape(y)}"
        raise ValueError(msg)
    if layers < 1:
        msg = f"w must have at least one layer, got shape {(layers, d_in, d_out)}"
        raise ValueError(msg)
    if (d_in, d_out) != (d, d):
        msg = (
            f"each layer of w must be (D, D) = ({d}, {d}) to fit x's {d} features, "
            f"got w of shape {(layers, d_in, d_out)}"
        )
        raise ValueError(msg)


def unsharded(x: jax.Array, y: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The same step in plain ``jax.numpy`` on one device: ``jax.value_and_grad``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from shard_tutorial.problems.pipeline_train_step import unsharded
      >>> loss, grad = unsharded(jnp.ones((1, 1, 1)), jnp.zeros((1, 1, 1)), jnp.zeros((1, 1, 1)))
      >>> float(loss), grad.tolist()  # tanh(0) = 0: loss 0, and dloss/dw = 2 * 0 * 1 * 1
      (0.0, [[[0.0]]])
    """
    dtype = jnp.result_type(x, y, w)
    x, y = jnp.asarray(x, dtype), jnp.asarray(y, dtype)

    def loss(w: jax.Array) -> jax.Array:
        return jnp.mean((_layers(x, w) - y) ** 2)

    return jax.value_and_grad(loss)(jnp.asarray(w, dtype))


def oracle(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The loss and its gradient in NumPy at 64 bits, the backward pass derived by hand.

    Forward ``h[l + 1] = tanh(h[l] @ w[l])``; backward from ``g = 2 (h[L] - y) /
    size``: ``p = g * (1 - h[l + 1] ** 2)``, ``dw[l] = sum over rows of h[l].T @ p``,
    ``g = p @ w[l].T``.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.pipeline_train_step import oracle
      >>> loss, grad = oracle(np.ones((1, 1, 1)), np.zeros((1, 1, 1)), np.full((1, 1, 1), 0.5))
      >>> round(float(loss), 6), grad.round(6).tolist()  # tanh(.5) ** 2; 2 tanh(.5) (1 - tanh(.5) ** 2)
      (0.213552, [[[0.726862]]])
    """
    x, y, w = precise(x), precise(y), precise(w)
    hs = [x]
    for layer in w:
        hs.append(np.tanh(hs[-1] @ layer))
    error = hs[-1] - y
    loss = np.mean(error**2)
    g = 2.0 * error / error.size
    grad = np.zeros_like(w)
    for layer in range(len(w) - 1, -1, -1):
        p = g * (1.0 - hs[layer + 1] ** 2)
        grad[layer] = np.einsum("mbi,mbj->ij", hs[layer], p)
        g = p @ w[layer].T
    return np.asarray(loss), grad


def _stages(case: Case, devices: int = 8) -> int:
    """How many stages the contract's mesh has for ``case``."""
    return usable_device_count(int(np.shape(case.args[2])[0]), devices)


def _explain(
    case: Case, expected: tuple[np.ndarray, np.ndarray], received: tuple[np.ndarray, np.ndarray]
) -> str | None:
    """Recognise the classic mistakes of a pipelined training step in a wrong ``(loss, grad)``.

    - the loss (and its gradient) ``M`` times too large, or of one microbatch
      only: the mean taken over a microbatch, not over every microbatch, row
      and column;
    - each stage's block of ``grad`` the sum of every stage's blocks: the
      gradients all-reduced (``psum``) over ``"stage"``;
    - only the last stage's layers with a gradient, or the other stages' wrong:
      the gradient of the activations sent to the wrong neighbour (or not at all).

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import Case
      >>> from shard_tutorial.problems.pipeline_train_step import _explain, oracle
      >>> rng = np.random.default_rng(0)
      >>> x, y, w = rng.normal(size=(4, 1, 2)), rng.normal(size=(4, 1, 2)), rng.normal(size=(2, 2, 2))
      >>> loss, grad = oracle(x, y, w)
      >>> print(_explain(Case("c", (x, y, w)), (loss, grad), (4 * loss, 4 * grad)))
      The loss and its gradient are 4 times too large...
    """
    x, y, w = (precise(a) for a in case.args)
    want_loss, want_grad = (precise(e) for e in expected)
    got_loss, got_grad = (precise(r) for r in received)
    if got_grad.shape != want_grad.shape or got_loss.shape != ():
        return None

    def close(a: np.ndarray, b: np.ndarray) -> bool:
        return bool(np.allclose(a, b, rtol=1e-3, atol=1e-6 + 1e-4 * np.abs(b).max(initial=0)))

    microbatches, layers = x.shape[0], w.shape[0]
    if microbatches > 1 and close(got_loss, microbatches * want_loss):
        return (
            f"The loss and its gradient are {microbatches} times too large: each microbatch's "
            "mean was added up over the M microbatches. The loss is the mean over every "
            "microbatch, row and column: divide each microbatch's sum of squares by M * B * D"
        )
    for m in range(microbatches if microbatches > 1 else 0):
        one, _ = oracle(x[m : m + 1], y[m : m + 1], w)
        if close(got_loss, one):
            return (
                f"The loss is that of microbatch {m} alone: the loss is the mean over every "
                "microbatch, row and column, each microbatch adding its sum of squares / "
                "(M * B * D) on the last stage"
            )
    if not close(got_loss, want_loss):
        return None
    for stages in device_counts(layers):
        blocks = want_grad.reshape(stages, layers // stages, *want_grad.shape[1:])
        summed = np.broadcast_to(blocks.sum(axis=0), blocks.shape).reshape(want_grad.shape)
        if close(got_grad, summed) and not close(summed, want_grad):
            return (
                f"Every stage's block of grad is the sum of the {stages} stages' blocks: the "
                'gradients were all-reduced (psum over "stage"). A stage\'s layers and their '
                "gradients never leave it: each stage returns the gradient of its own layers"
            )
        per = layers // stages
        tail_right = close(got_grad[layers - per :], want_grad[layers - per :])
        if tail_right and not close(got_grad[: layers - per], want_grad[: layers - per]):
            return (
                f"The last stage's {'layers have' if per > 1 else 'layer has'} the right "
                "gradient, the others not: the gradient of the activations did not reach the stages "
                "before. Each stage sends the gradient of its input back to the stage before "
                "it (jax.lax.ppermute, perm=[(i + 1, i), ...]), the other way from the "
                "activations"
            )
    return None


def _case(
    rng: np.random.Generator, label: str, microbatches: int, rows: int, d: int, layers: int
) -> Case:
    x = rng.normal(size=(microbatches, rows, d)).astype(np.float32)
    y = rng.normal(size=(microbatches, rows, d)).astype(np.float32)
    # Scaled so that tanh stays away from saturation through every layer.
    w = (rng.normal(size=(layers, d, d)) * 1.2 / np.sqrt(d)).astype(np.float32)
    return Case(label, (x, y, w))


def _generate(rng: np.random.Generator) -> Case:
    """One random case: 1 to 8 microbatches, up to 16 layers, small B and D.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems.pipeline_train_step import _generate
      >>> print(_generate(np.random.default_rng(1)).label)
      random: M=4, B=2, D=4, L=16
    """
    microbatches, rows = int(rng.integers(1, 9)), int(rng.integers(1, 4))
    d, layers = int(rng.integers(1, 6)), int(rng.integers(1, 17))
    label = f"random: M={microbatches}, B={rows}, D={d}, L={layers}"
    return _case(rng, label, microbatches, rows, d, layers)


def _cases() -> list[Case]:
    rng = np.random.default_rng(20261128)

    def case(label: str, microbatches: int, rows: int, d: int, layers: int) -> Case:
        return _case(rng, label, microbatches, rows, d, layers)

    example = Case(
        "example from the problem statement",
        (
            np.array([[[0.5, -1.0]], [[2.0, 0.0]]], np.float32),
            np.zeros((2, 1, 2), np.float32),
            np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]], np.float32),
        ),
    )
    # The held budget shows on the last cases, M = 4n: GPipe keeps 4n microbatches'
    # activations on a stage, 1F1B at most n.
    return [
        example,
        case("M=1, L=8: one microbatch through 8 stages and back", 1, 2, 3, 8),
        case("M=3, L=8: fewer microbatches than stages", 3, 2, 4, 8),
        case("L=1: one stage, no pipeline", 3, 2, 3, 1),
        case("L=6, M=2: 6 stages of 8 devices", 2, 1, 3, 6),
        case("M=8, L=16: 8 stages of 2 layers", 8, 2, 4, 16),
        case("M=32, L=8: M = 4n on 8 stages of 1 layer", 32, 16, 32, 8),
        case("M=16, L=4: M = 4n on 4 stages of 1 layer", 16, 16, 32, 4),
    ]


def _arrange(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments as the contract says they arrive: ``x``, ``y`` whole, ``w`` by layers."""
    x, y, w = args
    mesh = axis_mesh("stage", w.shape[0])
    return (*place((x, y), NamedSharding(mesh, P())), place(w, NamedSharding(mesh, P("stage"))))


def _mesh(args: tuple[Any, ...], devices: int) -> tuple[int, ...]:
    """The contract's mesh: ``axis_mesh("stage", L)``, the most devices that divide ``L``."""
    return (usable_device_count(int(np.shape(args[2])[0]), devices),)


def _w_block(args: tuple[Any, ...]) -> int:
    """The bytes of one stage's block of ``w`` (or of its gradient).

    A collective that moves that much moves layers, or their gradients, off their stage.

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.pipeline_train_step import _w_block
      >>> x, w = np.ones((2, 1, 4), np.float32), np.ones((8, 4, 4), np.float32)
      >>> _w_block((x, x, w)) == 8 // min(8, jax.device_count()) * 64
      True
    """
    x, y, w = args
    n = usable_device_count(int(np.shape(w)[0]), jax.device_count())
    itemsize = np.dtype(jnp.result_type(x.dtype, y.dtype, w.dtype)).itemsize
    return max(int(np.size(w)) // n * itemsize, 2 * itemsize)  # more than the loss's psum


TECHNIQUE = Technique(
    collectives=(("collective-permute",),),
    forbidden=(
        Forbidden(
            "all-gather",
            "a stage's layers never leave it: the activations travel from stage to stage "
            "(ppermute), not the weights",
            at_least=_w_block,
        ),
        Forbidden(
            "all-reduce",
            "a stage's gradients never leave it: each stage returns the gradient of its own "
            'layers, split over "stage" like w (only the loss, one number, is psummed)',
            at_least=_w_block,
        ),
    ),
    axis="stage",
    stays=Stays(
        (2,),
        "w (each stage's layers)",
        (
            "a stage's layers never leave it: activations travel forward and their gradients "
            "back (ppermute), computed by the layers where they live"
        ),
    ),
)
"""What a solution must do besides computing the right values."""


SMALL = 4096
"""Bytes the budget allows a right answer's held bytes to grow by besides ``x``, ``y`` and
its schedule: XLA's allocator rounds buffers up, and sizes differ with the loop's length."""


def _limits(args: tuple[Any, ...]) -> dict[str, float]:
    """How much more a device may hold with ``2n`` more microbatches, from ``M = 4n`` on.

    With ``2n`` more microbatches (:func:`_grown`), a right answer holds ``x`` and
    ``y`` grown by ``2n`` microbatches each, and a schedule ``4n`` ticks longer (two
    int32 tables of ``n`` stages, if it keeps them on the devices), and nothing more
    (``SMALL`` bytes of rounding): 1F1B keeps at most ``n`` microbatches on a stage,
    whatever ``M``. GPipe's order keeps every microbatch's activations, ``2n`` more of
    them. Judged from ``M = 4n`` on, on several devices (one has nothing to split).

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.pipeline_train_step import _limits
      >>> x, w = np.ones((32, 16, 32), np.float32), np.ones((8, 32, 32), np.float32)
      >>> jax.device_count() == 1 or _limits((x, x, w)) == {"growth": 2 * 16 * 16 * 32 * 4 + 2 * 32 * 8 * 4 + 4096}
      True
      >>> _limits((x[:8], x[:8], w))  # M < 4n: not judged
      {}
    """
    x, y, w = args
    n = usable_device_count(int(np.shape(w)[0]), jax.device_count())
    microbatches, rows, d = np.shape(x)
    if n == 1 or microbatches < 4 * n:
        return {}
    itemsize = np.dtype(jnp.result_type(x.dtype, y.dtype, w.dtype)).itemsize
    more = 2 * n  # microbatches
    return {"growth": 2 * more * rows * d * itemsize + 2 * (2 * more) * n * 4 + SMALL}


def _grown(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The case with ``2n`` more microbatches (its first ones again).

    Examples:
      >>> import jax, numpy as np
      >>> from shard_tutorial.problems.pipeline_train_step import _grown
      >>> x, w = np.ones((32, 2, 3), np.float32), np.ones((8, 3, 3), np.float32)
      >>> [a.shape for a in _grown((x, x, w))] == [(32 + 2 * min(8, jax.device_count()), 2, 3)] * 2 + [(8, 3, 3)]
      True
    """
    x, y, w = args
    more = 2 * usable_device_count(int(np.shape(w)[0]), jax.device_count())
    x, y = (jnp.concatenate([a, jnp.resize(a, (more, *a.shape[1:]))]) for a in (x, y))
    return x, y, w


BUDGET = Budget(
    _limits,
    "1F1B keeps what the backward steps need of at most n microbatches on a stage (in n "
    "slots, microbatch m in slot m % n), however many microbatches there are; keeping "
    "every microbatch's activations until the backward passes start (GPipe's order) "
    "holds more with every microbatch",
    grown=_grown,
)
"""What a device may hold: a bound that does not grow with ``M``."""


def _refusals() -> list[Case]:
    """One input per clause of the statement's "Raises" section, with the error it names."""
    x, w = np.ones((2, 2, 3), np.float32), np.ones((2, 3, 3), np.float32)
    return [
        Case("x a list, not an array", (x.tolist(), x, w), raises="TypeError"),
        Case("int32 y: not floating-point", (x, x.astype(np.int32), w), raises="TypeError"),
        Case("a 2-D x", (x[0], x, w), raises="ValueError"),
        Case("no microbatches (M = 0)", (x[:0], x[:0], w), raises="ValueError"),
        Case("y of another shape than x", (x, x[:1], w), raises="ValueError"),
        Case("layers of 2 x 2, x of 3 features", (x, x, w[:, :2, :2]), raises="ValueError"),
    ]


PROBLEM = Problem(
    name="pipeline_train_step",
    title="Pipeline-parallel training step",
    reference=pipeline_train_step,
    oracle=oracle,
    make_cases=_cases,
    unsharded=unsharded,
    rtol=1e-4,
    atol=1e-6,  # float32 through up to 16 layers and back, sums of M * B products
    explain=_explain,
    generate=_generate,
    imports=(
        "import jax",
        "import jax.numpy as jnp",
        "from jax.sharding import NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        'from shard_tutorial import axis_mesh  # axis_mesh("stage", L): the stages',
    ),
    technique=TECHNIQUE,
    mesh=_mesh,
    placement=(Placement(axis=None, spec="P()"), Placement(axis=0, spec='P("stage")')),
    make_refusals=_refusals,
    folder="scale",
    outputs=("loss", "grad"),
    arrange=_arrange,
    budget=BUDGET,
)
