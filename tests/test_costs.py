"""The cost calculator: its figures by hand for Llama 3 8B, and against the compiled step.

The calculator computes from shapes alone; these tests check it two ways that do
not go through it: arithmetic written out here from the published shapes, and the
real training step compiled on the fake devices (XLA's memory analysis and the
collectives of the compiled program), whose loss is checked against NumPy.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

from shard_tutorial import costs as C
from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import parse_collectives

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): its
# comparisons with compiled steps take about 40 s a pass.
pytestmark = pytest.mark.once

# Llama 3 8B, written out again: d, layers, heads, kv heads, ffn, vocab.
D, L, H, K, F, V = 4096, 32, 32, 8, 14336, 128256
HD = D // H
BLOCK = 2 * D + D * H * HD + 2 * D * K * HD + H * HD * D + 3 * D * F  # norms, q, k v, o, mlp
EDGES = 2 * V * D + D  # embedding, output layer, last norm
PARAMS = L * BLOCK + EDGES


def test_the_8b_config_has_llama_3_8bs_parameter_count():
    assert PARAMS == 8_030_261_248  # "8B": Meta's model card rounds this
    shapes = C.param_shapes(C.LLAMA3_8B)
    assert sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(shapes)) == PARAMS
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(shapes))


@pytest.mark.parametrize(
    ("strategy", "params_per_device"),
    [
        ("DP", PARAMS),
        ("FSDP", PARAMS // 256),
        # TP over 8: the blocks' matrices split 8 ways, norms, embedding and head whole.
        ("TP", L * (2 * D + (BLOCK - 2 * D) // 8) + EDGES),
        # FSDP x TP, 32 x 8: the blocks' matrices split 256 ways, the rest over "fsdp" only.
        ("FSDP x TP", L * (2 * D // 32 + (BLOCK - 2 * D) // 256) + EDGES // 32),
    ],
)
def test_memory_per_device_of_the_8b_config_on_256_devices_by_hand(strategy, params_per_device):
    c = C.costs(C.LLAMA3_8B, C.mesh_shape(strategy, 256), strategy)
    assert c.devices == 256
    assert c.params == c.grads == 4 * params_per_device
    assert c.optimizer_state == 8 * params_per_device + 4  # Adam's m and v, its int32 count
    assert c.total == 16 * params_per_device + 4
    momentum = C.costs(C.LLAMA3_8B, C.mesh_shape(strategy, 256), strategy, optimizer="momentum")
    assert momentum.optimizer_state == 4 * params_per_device


def test_traffic_of_the_8b_config_on_256_devices_by_hand():
    size = 4 * PARAMS
    dp = C.costs(C.LLAMA3_8B, {"data": 256}, "DP")
    assert dp.sent == pytest.approx(2 * 255 / 256 * size + 2 * 255 / 256 * 4, rel=1e-12)
    fsdp = C.costs(C.LLAMA3_8B, {"fsdp": 256}, "FSDP")
    assert fsdp.sent == pytest.approx(dp.sent, rel=1e-12)  # gather + scatter = all-reduce
    again = C.costs(C.LLAMA3_8B, {"fsdp": 256}, "FSDP", regather=True)
    assert again.sent - 2 * 255 / 256 * 4 == pytest.approx(1.5 * (dp.sent - 2 * 255 / 256 * 4))
    tp = C.costs(C.LLAMA3_8B, {"data": 32, "model": 8}, "TP", batch=256, seq_len=8192)
    activations = 4 * L * 2 * 7 / 8 * (256 // 32) * 8192 * D * 4
    grads = 2 * 31 / 32 * 4 * (L * (2 * D + (BLOCK - 2 * D) // 8) + EDGES)
    assert tp.sent == pytest.approx(activations + grads + 2 * 31 / 32 * 4, rel=1e-12)


def test_costs_rejects_what_does_not_fit_with_a_clear_message():
    with pytest.raises(ValueError, match="strategy must be one of"):
        C.costs(C.SMALL, {"data": 2}, "ZeRO")
    with pytest.raises(ValueError, match="optimizer must be one of"):
        C.costs(C.SMALL, {"data": 2}, "DP", optimizer="lion")
    with pytest.raises(ValueError, match=r"axes must be among"):
        C.costs(C.SMALL, {"pipe": 2}, "DP")
    with pytest.raises(ValueError, match=r"batch \(6\) must divide into data \* fsdp = 4"):
        C.costs(C.SMALL, {"data": 4}, "DP", batch=6)
    with pytest.raises(ValueError, match=r"embed has shape \(64, 32\): its axis 0"):
        C.costs(C.SMALL, {"fsdp": 128}, "FSDP", batch=128)
    with pytest.raises(ValueError, match=r"must divide n_kv_heads \(2\)"):
        C.costs(C.SMALL, {"model": 4}, "TP")
    with pytest.raises(TypeError, match="mesh_shape must be a mapping"):
        C.costs(C.SMALL, [2], "DP")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_kv_heads"):
        dataclasses.replace(C.SMALL, n_kv_heads=3)


@pytest.mark.parametrize("strategy", C.STRATEGIES)
def test_largest_fitting_layers_is_the_last_depth_that_fits(strategy):
    mesh, budget = C.mesh_shape(strategy, 64), 20 * C.GB  # few layers: quick to check

    def total(layers: int) -> int:
        return C.costs(dataclasses.replace(C.LLAMA3_8B, n_layers=layers), mesh, strategy).total

    n = C.largest_fitting_layers(C.LLAMA3_8B, mesh, strategy, budget=budget)
    # The embedding and output layer, whole in DP and TP, are 16.8 GB with Adam alone.
    assert {"DP": n == 0, "TP": 0 < n < 32}.get(strategy, n > 32)
    assert n == 0 or total(n) <= budget
    assert total(n + 1) > budget


def _check_mesh(strategy: str) -> dict[str, int]:
    """The mesh of the check: 8 devices if there are 8, one otherwise."""
    if jax.device_count() < 8:
        return {}
    return {"DP": {"data": 8}, "FSDP": {"fsdp": 8}, "TP": {"data": 4, "model": 2}}.get(
        strategy, {"fsdp": 4, "model": 2}
    )


BATCH, SEQ = 16, 8


@pytest.mark.parametrize(
    ("strategy", "regather"),
    [("DP", False), ("FSDP", False), ("FSDP", True), ("TP", False), ("FSDP x TP", False)],
)
def test_the_calculator_agrees_with_the_compiled_step_to_the_byte(strategy, regather):
    shape = _check_mesh(strategy)
    predicted = C.costs(C.SMALL, shape, strategy, batch=BATCH, seq_len=SEQ, regather=regather)
    params = C.init_params(C.SMALL, jax.random.key(0))
    state = C.init_optimizer(params, "adam")
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, C.SMALL.vocab, size=(BATCH, SEQ + 1)).astype(np.int32)
    step = C.train_step(C.SMALL, C.real_mesh(shape), strategy, regather=regather)
    compiled = step.lower(params, state, tokens).compile()

    memory = compiled.memory_analysis()
    token_bytes = tokens.nbytes // (predicted.mesh["data"] * predicted.mesh["fsdp"])
    assert memory.argument_size_in_bytes == (
        predicted.params + predicted.optimizer_state + token_bytes
    )
    outputs = len(jax.tree.leaves((params, state))) + 1  # and the loss
    # XLA also counts the tuple of the outputs: one 8-byte pointer each.
    assert memory.output_size_in_bytes == (
        predicted.params + predicted.optimizer_state + 4 + 8 * outputs
    )

    found = parse_collectives(compiled.as_text())
    sent = sum(ring_bytes(c, jax.device_count()) for c in found)
    gathers = sum(c.kind == "all-gather" for c in found)
    leaves = len(jax.tree.leaves(params))
    if regather and predicted.devices > 1 and gathers == leaves:
        # jax 0.10.2's XLA keeps the forward pass' gathers instead (see strategies page)
        predicted = C.costs(C.SMALL, shape, strategy, batch=BATCH, seq_len=SEQ)
    assert sent == pytest.approx(predicted.sent, rel=1e-12, abs=1e-9)
    kinds = {(c.kind, c.group_size) for c in found if c.group_size != 1}
    assert kinds == {(t.kind, t.devices) for t in predicted.transfers}

    new_params, _, loss = step(params, state, tokens)
    np.testing.assert_allclose(loss, C.numpy_loss(params, tokens, C.SMALL), rtol=1e-5)
    # One device, the JAX oracle: jitted, one program (run op by op it compiled 100).
    grads = jax.jit(jax.grad(C.loss), static_argnums=2)(params, tokens, C.SMALL)
    # Adam's first step, bias-corrected: m = g and v = g * g, so p - lr * g / (|g| + eps).
    want = jax.tree.map(
        lambda p, g: np.asarray(p) - 1e-3 * np.asarray(g) / (np.abs(g) + 1e-8), params, grads
    )
    for got, expected in zip(jax.tree.leaves(new_params), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(got, expected, atol=2e-5)
    assert not np.allclose(jax.tree.leaves(new_params)[0], jax.tree.leaves(params)[0])


def test_chart_and_table_give_every_figure_in_text():
    series = {
        s: [C.costs(C.LLAMA3_8B, C.mesh_shape(s, n), s) for n in (64, 256)] for s in C.STRATEGIES
    }
    picture = C.chart(series)
    for rows in series.values():
        for c in rows:
            assert f"{c.total / C.GB:.1f}" in picture.alt
            assert f"{c.sent / C.GB:.1f}" in picture.alt
    assert picture.svg.lstrip().startswith("<?xml")
    table = C.markdown_table([rows[1] for rows in series.values()])
    assert table.count("\n") == 2 + len(C.STRATEGIES) - 1
    assert "| DP | 256 (data) |" in table
