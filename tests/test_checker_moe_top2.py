"""The checker on moe_top2, where its corpus (tests/solutions/moe_top2) does not reach: at
capacity 0 the all-to-alls are asked of the traced program (XLA drops the empty ones from
the compiled program), and a buffer larger than the capacity costs the budget.

Judged in this process (judging.judged), at the suite's device count, on single cases.
"""

from __future__ import annotations

import pytest
from judging import judged

from shard_tutorial import PROBLEMS
from shard_tutorial.checking.worker import load_solution

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# corpus judges this problem on every stack and device count.
pytestmark = pytest.mark.once

NAME = "moe_top2"
PROBLEM = PROBLEMS[NAME]
BINDING, EMPTY = PROBLEM.cases[1], PROBLEM.cases[2]  # T=32, E=16; capacity 1 and 0

# A right layer, with {slots} the slots each device's buffer has at each expert (the
# capacity, or more) and {skip} what it does at capacity 0.
LAYER = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


def moe_top2(x, router_logits, w, capacity):
    T, D = x.shape
    E, _, F = w.shape
    mesh = axis_mesh("expert", math.gcd(T, E))
    n = mesh.shape["expert"]
    slots = {slots}

    def local(x, logits, w):
        t = x.shape[0]
        e1 = jnp.argmax(logits, axis=1)
        e2 = jnp.argmax(jnp.where(jax.nn.one_hot(e1, E, dtype=bool), -jnp.inf, logits), axis=1)
        pair = jnp.stack([jnp.max(logits, 1), jnp.take_along_axis(logits, e2[:, None], 1)[:, 0]], 1)
        g = jax.nn.softmax(pair, axis=1)
        e = jnp.concatenate([e1, e2])
        chosen = jax.nn.one_hot(e, E, dtype=jnp.int32)
        position = jnp.sum((jnp.cumsum(chosen, axis=0) - 1) * chosen, axis=1)
        position = jnp.where(position < capacity, position, slots)  # dropped: no slot
        dispatch = chosen[:, :, None] * jax.nn.one_hot(position, slots, dtype=x.dtype)[:, None]
        probs = jax.nn.softmax(logits, axis=1)
        sums = jax.lax.psum(jnp.stack([jnp.sum(chosen[:t], 0).astype(probs.dtype), probs.sum(0)]), "expert")
        aux = E * jnp.sum(sums[0] * sums[1]) / T**2
        {skip}
        inbox = jax.lax.all_to_all(jnp.einsum("sec,sd->ecd", dispatch, jnp.concatenate([x, x])), "expert", 0, 0, tiled=True)
        out = jnp.einsum("skcd,kdf->skcf", inbox.reshape(n, E // n, slots, D), w).reshape(E, slots, F)
        back = jax.lax.all_to_all(out, "expert", 0, 0, tiled=True)
        gate = jnp.concatenate([g[:, 0], g[:, 1]])[:, None, None]
        y = jnp.einsum("sec,ecf->sf", dispatch * gate, back)
        return y[:t] + y[t:], aux

    spec = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(a, spec) for a in (x, router_logits, w))
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=(P("expert"), P())))(
        x, router_logits, w
    )
"""


def _solution(tmp_path, **parts: str):
    path = tmp_path / f"{NAME}.py"
    path.write_text(LAYER.format(**({"slots": "capacity", "skip": ""} | parts)))
    return load_solution({"kind": "file", "path": str(path), "function": NAME})


def test_at_capacity_0_a_layer_that_skips_the_all_to_alls_is_told_so(tmp_path, device_count):
    skipping = _solution(
        tmp_path, skip="if capacity == 0:\n            return jnp.zeros((t, F), x.dtype), aux"
    )
    status, message = judged(PROBLEM, skipping, EMPTY)
    if device_count == 1:
        assert status == "pass", message  # one device: shard_map alone is asked
        return
    assert status == "technique", message
    assert "no all-to-all (all_to_all) in the program JAX traced (capacity 0" in message
    right = _solution(tmp_path)  # runs them on empty buffers: XLA drops them, and passes
    assert judged(PROBLEM, right, EMPTY) == ("pass", "")


def test_buffers_larger_than_the_capacity_cost_the_budget(tmp_path, device_count):
    roomy = _solution(tmp_path, slots="T // n")  # room for every token of the device
    status, message = judged(PROBLEM, roomy, BINDING)  # 4 slots per expert, capacity 1
    if device_count == 1:
        assert status == "pass", message
        return
    assert status == "budget", message
    # The dispatch and the return of 16 x 4 slots instead of 16 x 1, and aux's 2 x 16 sums.
    sent = 7 / 8 * (16 * 4 * (4 + 3) * 4 + 2 * 2 * 16 * 4)
    assert f"each device sends {sent:,.0f} bytes" in message
    allowed = 7 / 8 * (16 * 1 * (4 + 3) * 4 + 2 * 2 * 16 * 4)
    assert f"where this problem allows {allowed:,.0f}:" in message


def test_at_capacity_0_eager_all_to_alls_whose_empty_results_go_unused_pass(tmp_path):
    # Eager shard_map runs each all-to-all as a program of its own; a layer that then
    # writes zeros at capacity 0 (nothing is kept) leaves those programs out of its
    # answer's lineage. The statement's all-to-alls ran in the call: right, as the same
    # layer jitted is.
    source = LAYER.format(slots="capacity", skip="")
    source = source.replace(
        'y = jnp.einsum("sec,ecf->sf", dispatch * gate, back)',
        'y = jnp.einsum("sec,ecf->sf", dispatch * gate, back) if capacity else '
        "jnp.zeros((2 * t, F), x.dtype) * dispatch.sum()",  # varying, as y must be
    ).replace("return jax.jit(jax.shard_map(", "return (jax.shard_map(")
    path = tmp_path / f"{NAME}.py"
    path.write_text(source)
    eager = load_solution({"kind": "file", "path": str(path), "function": NAME})
    status, message = judged(PROBLEM, eager, EMPTY)
    assert status == "pass", message
