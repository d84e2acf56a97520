"""The transformer block on a 2 x 4 mesh against the same block on one device."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial.collective_costs import ring_bytes
from shard_tutorial.compiled import parse_collectives
from shard_tutorial.transformer_block import (
    SPECS,
    BlockConfig,
    init_params,
    loss,
    mesh_2x4,
    placed,
    predicted_costs,
    sharded_gradients,
    synthetic_data,
    train,
    training_step,
)

CONFIG = BlockConfig()

needs_8 = pytest.mark.skipif(jax.device_count() < 8, reason="the 2 x 4 mesh needs 8 devices")


def _numpy_block(params, x):
    """The block in NumPy, float64: an oracle written apart from the package's jax code."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(x, np.float64)

    def norm(v, scale):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + 1e-6) * scale

    h = norm(x, p["norm1"])
    q, k, v = (np.einsum("btd,dhe->bthe", h, p["qkv"][:, i]) for i in range(3))
    scores = np.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    t = x.shape[1]
    scores = np.where(np.tril(np.ones((t, t), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    x = x + np.einsum("bqhe,hed->bqd", np.einsum("bhqk,bkhe->bqhe", weights, v), p["out"])
    u = norm(x, p["norm2"]) @ p["up"]
    gelu = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
    return x + gelu @ p["down"]


def test_the_one_device_block_matches_numpy():
    params = init_params(CONFIG, 3)
    x, _ = synthetic_data(CONFIG, 3, batches=1)
    want = _numpy_block(params, x[0])
    got = jax.jit(loss)({k: jnp.asarray(v) for k, v in params.items()}, x[0], want)
    assert float(got) < 1e-10  # the block's output is the oracle's, to float32 rounding


@needs_8
def test_sharded_gradients_equal_one_devices_and_lie_as_the_parameters():
    mesh = mesh_2x4()
    params, xs, ys = placed("fsdp_tp_sp", init_params(CONFIG, 1), *synthetic_data(CONFIG, 1, 1))
    value, grads = jax.jit(sharded_gradients(mesh))(params, xs[0], ys[0])
    one = {k: jnp.asarray(np.asarray(v)) for k, v in params.items()}
    want_value, want = jax.jit(jax.value_and_grad(loss))(one, np.asarray(xs[0]), np.asarray(ys[0]))
    np.testing.assert_allclose(value, want_value, rtol=1e-6)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, want[name], rtol=1e-4, atol=1e-7, err_msg=name)
        assert grad.sharding.is_equivalent_to(NamedSharding(mesh, SPECS[name]), grad.ndim), name


@needs_8
def test_the_step_compiles_to_fsdp_gathers_and_sequence_parallel_collectives():
    config = CONFIG
    params, xs, ys = placed("fsdp_tp_sp", init_params(config, 0), *synthetic_data(config, 0, 1))
    step = training_step("fsdp_tp_sp", 3e-3)
    program = step.lower(params, optax.adam(3e-3).init(params), xs[0], ys[0]).compile()
    found = parse_collectives(program.as_text())
    counted = collections.Counter((c.kind, c.group_size) for c in found)
    assert counted == {
        ("all-gather", 2): 4,  # FSDP: each weight matrix gathered over "data"
        ("reduce-scatter", 2): 4,  # ... and its gradient reduce-scattered back
        ("all-gather", 4): 4,  # SP -> TP before each sub-layer, forward and backward
        ("reduce-scatter", 4): 4,  # TP -> SP after each sub-layer, forward and backward
        ("all-reduce", 8): 1,  # the loss and the norms' gradients, combined
    }
    # Over "model", activations: this device's 4 sequences, whole (16 tokens) or a quarter.
    model = {c.result for c in found if c.group_size == 4}
    assert model == {"f32[4,16,32]", "f32[4,4,32]"}
    assert sum(ring_bytes(c) for c in found) == 57_799


@pytest.mark.parametrize(("data", "model"), [(2, 4), (8, 8), (1, 4), (2, 1)])
def test_the_predicted_costs_are_the_hand_formulas(data, model):
    # Llama 3 8B's width, 8 sequences of 8,192 tokens: nothing is allocated.
    config = BlockConfig(d_model=4096, heads=32, d_ff=14336, seq=8192, batch=8)
    d, f, t, b = config.d_model, config.d_ff, config.seq, config.batch
    costs = predicted_costs(config, data=data, model=model)
    matrices = 4 * d * d + 2 * d * f  # qkv, out, up, down: split over every device
    assert costs.params == 4 * (matrices // (data * model) + 2 * d)  # the norms whole
    assert costs.optimizer_state == 2 * costs.params + 4
    assert costs.batch == 2 * 4 * (b // data) * (t // model) * d
    sent = {(x.kind, x.devices): x.sent for x in costs.transfers}
    want = {}
    if data > 1:
        want[("all-gather", data)] = (data - 1) / data * 4 * matrices / model
        want[("reduce-scatter", data)] = (data - 1) * 4 * matrices / (data * model)
    if model > 1:
        whole = 4 * (b // data) * t * d  # a device's sequences, every token
        want[("all-gather", model)] = 4 * (model - 1) / model * whole
        want[("reduce-scatter", model)] = 4 * (model - 1) * whole / model
    want[("all-reduce", data * model)] = 2 * (data * model - 1) / (data * model) * 4 * (1 + 2 * d)
    assert sent.keys() == want.keys()
    for key, value in want.items():
        assert sent[key] == pytest.approx(value, rel=1e-12), key


def test_sizes_the_calculators_mesh_cannot_split_are_refused_with_their_name():
    with pytest.raises(ValueError, match=r"config.heads \(4\) must be a multiple of model \(8\)"):
        predicted_costs(model=8)
    with pytest.raises(ValueError, match="data must be at least 1"):
        predicted_costs(data=0)


@needs_8
@pytest.mark.parametrize(
    "config",
    [CONFIG, BlockConfig(d_model=64, heads=8, d_ff=96, seq=8, batch=2)],
    ids=["page", "other"],
)
def test_the_predicted_costs_are_the_compiled_steps(config):
    params, xs, ys = placed("fsdp_tp_sp", init_params(config, 0), *synthetic_data(config, 0, 1))
    step = training_step("fsdp_tp_sp", 3e-3)
    program = step.lower(params, optax.adam(3e-3).init(params), xs[0], ys[0]).compile()
    compiled = collections.defaultdict(lambda: [0, 0.0])
    for c in parse_collectives(program.as_text()):
        compiled[(c.kind, c.group_size)][0] += 1
        compiled[(c.kind, c.group_size)][1] += ring_bytes(c)
    predicted = predicted_costs(config)
    assert {(t.kind, t.devices): [t.count, t.sent] for t in predicted.transfers} == compiled
    assert predicted.arguments == program.memory_analysis().argument_size_in_bytes


@needs_8
def test_each_device_holds_about_an_eighth_of_the_arguments():
    config = CONFIG
    data = synthetic_data(config, 0, 1)
    sizes = {}
    for strategy in ("fsdp_tp_sp", "unsharded"):
        params, xs, ys = placed(strategy, init_params(config, 0), *data)
        step = training_step(strategy, 3e-3)
        program = step.lower(params, optax.adam(3e-3).init(params), xs[0], ys[0]).compile()
        sizes[strategy] = program.memory_analysis().argument_size_in_bytes
    assert 7 < sizes["unsharded"] / sizes["fsdp_tp_sp"] <= 8


@needs_8
def test_training_on_the_mesh_follows_one_device_step_by_step():
    split = train("fsdp_tp_sp", steps=40)
    unsplit = train("unsharded", steps=40)
    np.testing.assert_allclose(split, unsplit, rtol=1e-5)
    assert split[-1] < 0.5 * split[0]
    # A step off by a little would show: 1% more learning rate is outside the tolerance.
    assert not np.allclose(train("unsharded", steps=40, lr=3.03e-3), unsplit, rtol=1e-5)


def test_sizes_the_mesh_cannot_split_are_refused_with_their_name():
    with pytest.raises(ValueError, match=r"config\.heads \(2\) must be a multiple of 4"):
        train("fsdp_tp_sp", steps=1, config=BlockConfig(d_model=32, heads=2))
    with pytest.raises(ValueError, match="d_model \\(30\\) must be a multiple of heads"):
        BlockConfig(d_model=30)
    with pytest.raises(ValueError, match="strategy must be one of"):
        train("pipeline", steps=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="steps"):
        train("unsharded", steps=1.5)  # type: ignore[arg-type]


@pytest.mark.skipif(jax.device_count() >= 8, reason="fewer than 8 devices only")
def test_with_fewer_than_8_devices_the_mesh_says_what_it_needs():
    mesh_2x4.cache_clear()
    with pytest.raises(ValueError, match="needs 8 devices, and JAX has"):
        mesh_2x4()


def test_the_layout_splits_every_matrix_over_both_axes():
    for name, spec in SPECS.items():
        axes = {a for a in spec if a is not None}
        assert axes == (set() if name.startswith("norm") else {"data", "model"}), name
    assert P() == SPECS["norm1"]
