"""The checker on ulysses_attention: the budget's two figures, each on the answer it is about.

The corpus (tests/solutions/ulysses_attention) holds the right answers in four styles
and each classic mistake with its verdict; here, each judged on the one case it needs,
the two ways an answer can keep the technique (all-to-alls only) and still spend what
Ulysses saves: every head of k and v on every device (bytes held), and an all-to-all
that sends every head to every device (bytes sent). Judged in this process
(judging.judged), at the suite's device count.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from judging import judged, pasted_reference

from shard_tutorial import PROBLEMS, axis_mesh
from shard_tutorial.checking.worker import load_solution

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

NAME = "ulysses_attention"
PROBLEM = PROBLEMS[NAME]
BIG = PROBLEM.cases[-1]  # T=64, H=8, K=32: the case whose budget limits what is held
assert BIG.label == "T=64, H=8, K=32, causal"


def _attend(q, k, v, causal):
    """Each head's attention over every token the device holds (not the package's code)."""
    length = q.shape[0]
    s = jnp.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[2])
    if causal:
        s = jnp.where(jnp.tril(jnp.ones((length, length), bool)), s, -jnp.inf)
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, axis=-1), v)


def every_head_to_everyone(q, k, v, causal=False):
    """k and v tiled n times along the heads, so the all-to-all gives each device every head."""
    length, heads, _ = q.shape
    mesh = axis_mesh("seq", math.gcd(length, heads))
    n = mesh.shape["seq"]

    def local(q, k, v):
        q = jax.lax.all_to_all(q, "seq", 1, 0, tiled=True)
        first = jax.lax.axis_index("seq") * (heads // n)
        k, v = (jax.lax.all_to_all(jnp.tile(a, (1, n, 1)), "seq", 1, 0, tiled=True)
                for a in (k, v))  # fmt: skip
        k, v = (jax.lax.dynamic_slice_in_dim(a, first, heads // n, 1) for a in (k, v))
        return jax.lax.all_to_all(_attend(q, k, v, causal), "seq", 0, 1, tiled=True)

    tokens = P("seq", None, None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, tokens)) for a in (q, k, v))
    attend = jax.shard_map(local, mesh=mesh, in_specs=(tokens,) * 3, out_specs=tokens)
    return jax.jit(attend)(q, k, v)


def test_an_all_to_all_of_every_head_is_over_the_sent_budget(device_count):
    status, message = judged(PROBLEM, every_head_to_everyone, PROBLEM.cases[2])  # 8 heads on 8
    if device_count == 1:
        assert status == "pass", message  # nothing is sent on one device
        return
    assert status == "budget", message
    # q and the output: 2 x 7/8 of a 256-byte block; k and v tiled 8 times: 2 x 7/8 x 2048.
    assert "each device sends 4,032 bytes" in message
    assert "where this problem allows 896" in message  # 4 x 7/8 x 256


def whole_k_and_v(q, k, v, causal=False, *, through_host=True):
    """k and v placed whole on every device (in_specs=P()), each device slicing its heads.

    Through the host (``np.asarray``, then ``jax.device_put``) unless asked: a copy
    from the host sends nothing between devices, so only what a device holds shows it.
    """
    length, heads, _ = q.shape
    mesh = axis_mesh("seq", math.gcd(length, heads))
    n = mesh.shape["seq"]

    def local(q, k, v):
        q = jax.lax.all_to_all(q, "seq", 1, 0, tiled=True)  # (T, H / n, K)
        first = jax.lax.axis_index("seq") * (heads // n)
        k, v = (jax.lax.dynamic_slice_in_dim(a, first, heads // n, 1) for a in (k, v))
        return jax.lax.all_to_all(_attend(q, k, v, causal), "seq", 0, 1, tiled=True)

    tokens, whole = P("seq", None, None), P()
    q = jax.device_put(q, NamedSharding(mesh, tokens))
    if through_host:
        k, v = np.asarray(k), np.asarray(v)
    k, v = (jax.device_put(a, NamedSharding(mesh, whole)) for a in (k, v))
    attend = jax.shard_map(local, mesh=mesh, in_specs=(tokens, whole, whole), out_specs=tokens)
    return jax.jit(attend)(q, k, v)


def test_k_and_v_whole_on_every_device_is_over_the_held_budget(device_count):
    # Right values, all-to-alls only and fewer bytes sent than asked (k and v made whole
    # through the host): only what it holds tells it from Ulysses.
    status, message = judged(PROBLEM, whole_k_and_v, BIG)
    if device_count == 1:
        assert status == "pass", message  # one device holds everything: no limit there
        return
    assert status == "budget", message
    assert "its arguments, outputs and temporaries" in message
    assert f"where this problem allows {PROBLEM.budget.limits(BIG.args)['held']:,.0f}" in message


def test_k_and_v_gathered_by_a_device_put_count_as_sent(device_count):
    # The same gather by a copy from one layout to another: the bytes it moves between
    # devices count as sent, as an all-gather's would.
    status, message = judged(PROBLEM, functools.partial(whole_k_and_v, through_host=False), BIG)
    if device_count == 1:
        assert status == "pass", message
        return
    assert status == "budget", message
    n = min(device_count, 8)
    moved = 2 * (n - 1) * int(np.size(BIG.args[1])) // n * 4  # k and v, less a device's block
    assert f"2 jax.device_puts from one layout to another, {moved:,} bytes to a device" in message
    assert "Moved by jax.device_put:" in message


def test_the_pasted_reference_passes_on_the_big_case(tmp_path):
    path = tmp_path / f"{NAME}.py"
    path.write_text(pasted_reference(NAME))
    solution = load_solution({"kind": "file", "path": str(path), "function": NAME})
    assert judged(PROBLEM, solution, BIG)[0] == "pass"
