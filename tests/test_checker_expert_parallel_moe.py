"""The checker on expert_parallel_moe: right solutions written as a reader would pass; each
classic mistake of its page fails with its explanation; each shortcut gets the verdict it
deserves; the budget is the reference's, to the byte (the reference's file passes, in
test_checker.py, as every problem's does).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from judging import check_here, judged

from shard_tutorial import PROBLEMS, axis_mesh
from shard_tutorial.checking.worker import load_solution

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

# Judged in this process (judging.check_here: the checker's worker step and judge, no
# subprocess), at the suite's device count, 1 or 8.

NAME = "expert_parallel_moe"
PROBLEM = PROBLEMS[NAME]
SEED = 13

HEADER = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


def expert_parallel_moe(x, router_logits, w):
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    split = NamedSharding(mesh, P("expert"))
    x, router_logits, w = (jax.device_put(a, split) for a in (x, router_logits, w))
    layer = jax.shard_map(local, mesh=mesh, in_specs=P("expert"), out_specs=P("expert"))
    return {call}(x, router_logits, w)

"""

# Right: the choice of expert sent as int32 ids, in an all-to-all of its own.
RIGHT_WITH_IDS = """
def local(x, logits, w):
    n, per_device, local_experts = jax.lax.axis_size("expert"), x.shape[0], w.shape[0]
    expert = jnp.argmax(logits, axis=1)
    device = expert // local_experts
    to = device[None, :] == jnp.arange(n)[:, None]
    send = lambda a: jax.lax.all_to_all(a, "expert", 0, 0, tiled=True)
    tokens = send(jnp.where(to[:, :, None], x[None], 0))
    ids = send(jnp.where(to, expert % local_experts, -1))
    results = jnp.zeros(tokens.shape[:2] + w.shape[2:], jnp.result_type(x, w))
    for e in range(local_experts):
        results = jnp.where((ids == e)[..., None], tokens @ w[e], results)
    back = send(results)
    return back[device, jnp.arange(per_device)]
"""

# The reference's own body: the one-hot choice travels with the token.
RIGHT_ONE_HOT = """
def local(x, logits, w):
    n, local_experts = jax.lax.axis_size("expert"), w.shape[0]
    expert = jnp.argmax(logits, axis=1)
    device = expert // local_experts
    choice = jax.nn.one_hot(expert % local_experts, local_experts, dtype=x.dtype)
    to = device[None, :] == jnp.arange(n)[:, None]
    outbox = jnp.where(to[:, :, None], jnp.concatenate([x, choice], axis=1)[None], 0)
    inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=True)
    tokens, chosen = inbox[..., : x.shape[1]], inbox[..., x.shape[1] :]
    every = jnp.einsum("std,edf->stef", tokens, w)
    results = jnp.sum(jnp.where(chosen[..., None] > 0, every, 0), axis=2)
    back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)
    return back[device, jnp.arange(x.shape[0])]
"""

LOCAL_ARGMAX = """
def local(x, logits, w):
    first = jax.lax.axis_index("expert") * w.shape[0]
    mine = jax.lax.dynamic_slice_in_dim(logits, first, w.shape[0], axis=1)
    return jnp.einsum("td,tdf->tf", x, w[jnp.argmax(mine, axis=1)])
"""

NO_RETURN = RIGHT_ONE_HOT.replace(
    '    back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)\n'
    "    return back[device, jnp.arange(x.shape[0])]\n",
    "    return results.sum(axis=0)\n",
)

# A buffer of T / n / n slots per destination: enough if the tokens spread evenly.
DROPPING = """
def local(x, logits, w):
    n, per_device, local_experts = jax.lax.axis_size("expert"), x.shape[0], w.shape[0]
    capacity = max(per_device // n, 1)
    expert = jnp.argmax(logits, axis=1)
    device = expert // local_experts
    to = device[None, :] == jnp.arange(n)[:, None]
    rank = jnp.cumsum(to, axis=1)[device, jnp.arange(per_device)] - 1
    kept = rank < capacity
    slot = jnp.where(kept, rank, capacity)
    message = jnp.concatenate(
        [x, jax.nn.one_hot(expert % local_experts, local_experts, dtype=x.dtype)], axis=1
    )
    outbox = jnp.zeros((n, capacity + 1, message.shape[1]), x.dtype)
    outbox = outbox.at[device, slot].set(message)[:, :capacity]
    inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=True)
    tokens, chosen = inbox[..., : x.shape[1]], inbox[..., x.shape[1] :]
    every = jnp.einsum("std,edf->stef", tokens, w)
    results = jnp.sum(jnp.where(chosen[..., None] > 0, every, 0), axis=2)
    back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)
    mine = back[device, jnp.minimum(slot, capacity - 1)]
    return jnp.where(kept[:, None], mine, 0)
"""

GATHER_W = """
def local(x, logits, w):
    every_expert = jax.lax.all_gather(w, "expert", axis=0, tiled=True)
    return jnp.einsum("td,tdf->tf", x, every_expert[jnp.argmax(logits, axis=1)])
"""


ONE_PER_DEVICE = "T=16, D=4, E=8, F=3: one expert per device on 8"
TWO_PER_DEVICE = "T=24, E=16: two experts per device on 8"
SKEWED = "T=32, E=8: every token chooses expert 0"


def _solution(tmp_path, body, call="jax.jit(layer)"):
    path = tmp_path / f"{NAME}.py"
    path.write_text(HEADER.format(call=call) + body)
    return load_solution({"kind": "file", "path": str(path), "function": NAME})


def _judged(tmp_path, body, label, call="jax.jit(layer)"):
    case = next(c for c in PROBLEM.cases if c.label == label)
    return judged(PROBLEM, _solution(tmp_path, body, call), case)


@pytest.mark.parametrize("body", [RIGHT_WITH_IDS, RIGHT_ONE_HOT], ids=["ids", "one-hot"])
def test_a_readers_right_solution_passes_jitted(tmp_path, body):
    # The cases of a right answer of the corpus (tests/judging.py: check_here's lean).
    report = check_here(NAME, _solution(tmp_path, body), seed=SEED, lean=True)
    assert report.passed, str(report)


def test_argmax_over_the_devices_own_experts_fails_with_its_explanation(tmp_path, device_count):
    status, message = _judged(tmp_path, LOCAL_ARGMAX, ONE_PER_DEVICE)
    if device_count == 1:  # one device holds every expert: right values, nothing to send
        assert status == "pass", message
        return
    assert status == "fail", message
    assert "Each token went to the best expert on its own device" in message
    assert "not to the best of all 8" in message  # T=16, E=8 on 8 devices: 1 expert there


def test_forgetting_the_return_trip_fails_with_its_explanation(tmp_path, device_count):
    status, message = _judged(tmp_path, NO_RETURN, TWO_PER_DEVICE)
    if device_count == 1:  # one device: the results are already home
        assert status == "pass", message
        return
    assert status == "fail", message
    assert "The results stayed on the devices of the experts that computed them" in message


def test_a_too_small_capacity_drops_tokens_and_fails(tmp_path, device_count):
    status, message = _judged(tmp_path, DROPPING, SKEWED)
    if device_count == 1:  # one device: T slots, none dropped
        assert status == "pass", message
        return
    assert status == "fail", message
    # Capacity max(4 // 8, 1) = 1: each of 8 devices keeps 1 of its 4 tokens, 24 dropped.
    assert "24 of the 32 tokens were dropped" in message


def test_gathering_the_experts_fails_on_technique(tmp_path, device_count):
    status, message = _judged(tmp_path, GATHER_W, ONE_PER_DEVICE)
    if device_count == 1:  # a gather over one device moves nothing: shard_map alone asked
        assert status == "pass", message
        return
    assert status == "technique", message
    assert "no all-to-all (all_to_all) from the code inside jax.shard_map" in message
    assert "all-gather" in message


# --- shortcuts ---------------------------------------------------------------------


def _moe_on_one_device(x, logits, w):
    x, logits, w = (jnp.asarray(np.asarray(a)) for a in (x, logits, w))
    return jnp.einsum("td,tdf->tf", x, w[jnp.argmax(logits, axis=1)])


def one_device(x, logits, w):
    """The layer on one device, then split over the mesh as asked."""
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    return jax.device_put(
        _moe_on_one_device(x, logits, w), jax.sharding.NamedSharding(mesh, jax.P("expert"))
    )


def dead_collectives(x, logits, w):
    """The package's layer run and thrown away; the answer computed on one device."""
    from shard_tutorial import expert_parallel_moe  # noqa: PLC0415

    jax.block_until_ready(expert_parallel_moe(x, logits, w))
    return _moe_on_one_device(x, logits, w)


def wraps_the_reference(x, logits, w):
    from shard_tutorial import expert_parallel_moe  # noqa: PLC0415

    return expert_parallel_moe(x, logits, w) * 1


def _dispatch_then_psum(x, logits, w):
    n, per_device, local_experts = jax.lax.axis_size("expert"), x.shape[0], w.shape[0]
    here = jax.lax.axis_index("expert")
    expert = jnp.argmax(logits, axis=1)
    device = expert // local_experts
    to = device[None, :] == jnp.arange(n)[:, None]
    choice = jax.nn.one_hot(expert % local_experts, local_experts, dtype=x.dtype)
    outbox = jnp.where(to[:, :, None], jnp.concatenate([x, choice], axis=1)[None], 0)
    inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=True)
    tokens, chosen = inbox[..., : x.shape[1]], inbox[..., x.shape[1] :]
    every = jnp.einsum("std,edf->stef", tokens, w)
    results = jnp.sum(jnp.where(chosen[..., None] > 0, every, 0), axis=2)  # (n, T/n, F)
    everyone = jax.lax.psum(results.reshape(-1, results.shape[-1]), "expert")  # (T, F)
    return jax.lax.dynamic_slice_in_dim(everyone, here * per_device, per_device)


def psum_instead_of_return(x, logits, w):
    """The collective the problem avoids: every device's results added up everywhere."""
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    split = jax.sharding.NamedSharding(mesh, jax.P("expert"))
    args = (jax.device_put(a, split) for a in (x, logits, w))
    return jax.shard_map(
        _dispatch_then_psum, mesh=mesh, in_specs=jax.P("expert"), out_specs=jax.P("expert")
    )(*args)


def _per_expert_buffers(x, logits, w):
    n, local_experts = jax.lax.axis_size("expert"), w.shape[0]
    expert = jnp.argmax(logits, axis=1)
    to = expert[None, :] == jnp.arange(n * local_experts)[:, None]  # (E, T/n)
    outbox = jnp.where(to[:, :, None], x[None], 0)  # a buffer of T/n slots per expert
    inbox = jax.lax.all_to_all(outbox, "expert", 0, 0, tiled=True)  # (n * E/n, T/n, D)
    inbox = inbox.reshape(n, local_experts, *inbox.shape[1:])
    results = jnp.einsum("setd,edf->setf", inbox, w).reshape(n * local_experts, x.shape[0], -1)
    back = jax.lax.all_to_all(results, "expert", 0, 0, tiled=True)
    return back[expert, jnp.arange(x.shape[0])]


def per_expert_buffers(x, logits, w):
    """Over budget: a buffer of T / n slots per expert (GShard's layout) instead of per device."""
    mesh = axis_mesh("expert", math.gcd(x.shape[0], w.shape[0]))
    split = jax.sharding.NamedSharding(mesh, jax.P("expert"))
    args = (jax.device_put(a, split) for a in (x, logits, w))
    return jax.shard_map(
        _per_expert_buffers, mesh=mesh, in_specs=jax.P("expert"), out_specs=jax.P("expert")
    )(*args)


# (shortcut, case label, status on 8 devices, words of its message, status on 1 device)
SHORTCUTS = [
    (one_device, None, "technique", "not with jax.shard_map", "technique"),
    (dead_collectives, None, "placement", "1 device", "technique"),
    (wraps_the_reference, None, "reference", "package's own", "reference"),
    (psum_instead_of_return, None, "technique", "all-reduce", "pass"),
    (per_expert_buffers, TWO_PER_DEVICE, "budget", "sends 1,176 bytes", "pass"),
]


@pytest.mark.parametrize(
    ("shortcut", "label", "status", "words", "on_one"),
    SHORTCUTS,
    ids=[s[0].__name__ for s in SHORTCUTS],
)
def test_each_shortcut_gets_the_verdict_it_deserves(
    shortcut, label, status, words, on_one, device_count
):
    case = next(c for c in PROBLEM.cases if c.label == (label or ONE_PER_DEVICE))
    got, message = judged(PROBLEM, shortcut, case)
    if device_count == 1:
        assert got == on_one, message
        return
    assert (got, words in message) == (status, True), message


def test_the_budget_is_two_all_to_alls_of_t_over_n_slots():
    # That the reference sends exactly this is tests/test_budgets.py's, for every budget.
    for case in PROBLEM.cases:
        args = PROBLEM.arranged(case)
        x, _, w = case.args
        n = math.prod(PROBLEM.mesh_shape(case, jax.device_count()))
        tokens, d = x.shape
        experts, _, f = w.shape
        # float32 throughout: a one-hot of E / n experts is at least an int32 id's 4 bytes.
        per_slot = 4 * (d + experts // n + f)
        assert PROBLEM.budget.limits(args)["sent"] == (n - 1) * (tokens // n) * per_slot


def test_ids_as_int32_keep_within_the_budget_in_bfloat16(tmp_path, device_count):
    """XLA on CPU sends bfloat16 as float32: the budget counts 4 bytes a number, as sent."""
    solution = _solution(tmp_path, RIGHT_WITH_IDS)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype(jnp.bfloat16)
    w = rng.normal(size=(8, 4, 3)).astype(jnp.bfloat16)
    case = type(PROBLEM.cases[0])("bf16", (x, rng.normal(size=(16, 8)).astype(np.float32), w))
    assert judged(PROBLEM, solution, case)[0] == "pass", judged(PROBLEM, solution, case)
    n = device_count
    assert PROBLEM.budget.limits(PROBLEM.arranged(case))["sent"] == (n - 1) * (16 // n) * (
        4 * 4 + 4 + 4 * 3
    )
