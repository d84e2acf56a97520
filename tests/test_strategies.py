"""DP, FSDP and TP compared: each step against independent oracles, and what each device holds."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shard_tutorial.strategies import (
    STRATEGIES,
    bytes_per_device,
    chart,
    compare,
    gradients,
    make_problem,
    markdown_table,
    measure,
    mesh_for,
    mlp_loss,
    oracle_step,
    sgd_step,
    unsharded_step,
)

LR = 0.1
ATOL = 1e-5  # float32 sums of up to 64 hidden units, in another order than NumPy's float64


def assert_close(received: tuple[jax.Array, jax.Array], expected: tuple[np.ndarray, ...]) -> None:
    for name, array, want in zip(("w1", "w2"), received, expected, strict=True):
        got = np.asarray(array)
        assert got.shape == want.shape, name
        assert got.dtype == np.float32, name
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_strategy_takes_the_numpy_step_and_the_unsharded_jax_step(strategy):
    w1, w2, x, y = make_problem()
    new = sgd_step(strategy, w1, w2, x, y, LR)
    assert_close(new, oracle_step(w1, w2, x, y, LR))
    assert_close(new, tuple(np.asarray(a) for a in unsharded_step(w1, w2, x, y, LR)))
    # A step that moves nothing would still match a step of lr=0: make sure this one moved.
    assert not np.allclose(np.asarray(new[0]), w1)


@settings(max_examples=4)
@given(
    batch=st.integers(1, 12),
    d=st.integers(1, 6),
    hidden=st.integers(1, 12),
    d_out=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_every_strategy_is_right_for_any_shapes(batch, d, hidden, d_out, seed):
    w1, w2, x, y = make_problem(batch, d, hidden, d_out, seed=seed)
    want = oracle_step(w1, w2, x, y, LR)
    for strategy in STRATEGIES:
        assert_close(sgd_step(strategy, w1, w2, x, y, LR), want)


def test_the_strategies_agree_with_each_other_to_the_last_bits_that_matter():
    problem = make_problem(seed=3)
    steps = [sgd_step(s, *problem, LR) for s in STRATEGIES]
    for new in steps[1:]:
        assert_close(new, tuple(np.asarray(a, np.float64) for a in steps[0]))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_gradients_are_jax_grad_of_the_unsharded_loss(strategy):
    w1, w2, x, y = make_problem(seed=1)
    want = jax.grad(mlp_loss, argnums=(0, 1))(w1, w2, x, y)
    assert_close(gradients(strategy, w1, w2, x, y), tuple(np.asarray(g) for g in want))


def test_the_meshes_are_the_packages_and_use_every_device(device_count):
    w1, _, x, _ = make_problem()
    shapes = {s: dict(mesh_for(s, w1, x).shape) for s in STRATEGIES}
    if device_count == 8:
        assert shapes == {"DP": {"data": 8}, "FSDP": {"data": 8}, "TP": {"data": 2, "model": 4}}
    else:
        assert shapes == {"DP": {"data": 1}, "FSDP": {"data": 1}, "TP": {"data": 1, "model": 1}}


def test_dp_and_fsdp_hold_different_parameter_bytes_per_device(device_count):
    problem = make_problem()
    w1, w2 = problem[:2]
    whole = w1.nbytes + w2.nbytes  # 6144
    held = {s: bytes_per_device(sgd_step(s, *problem, LR)) for s in STRATEGIES}
    for strategy, per_device in held.items():
        assert len(per_device) == device_count, strategy  # every device holds a part
        assert len(set(per_device.values())) == 1, strategy  # and the same amount
    one = {s: next(iter(per_device.values())) for s, per_device in held.items()}
    if device_count == 8:
        assert one == {"DP": whole, "FSDP": whole // 8, "TP": whole // 4}
        assert one["DP"] != one["FSDP"]
    else:
        assert one == {"DP": whole, "FSDP": whole, "TP": whole}


def test_each_device_keeps_a_gradient_the_size_of_its_parameters(device_count):
    problem = make_problem()
    for strategy in STRATEGIES:
        params = bytes_per_device(sgd_step(strategy, *problem, LR))
        grads = bytes_per_device(gradients(strategy, *problem))
        assert grads == params, strategy
    fsdp = bytes_per_device(gradients("FSDP", *problem))
    assert set(fsdp.values()) == {(problem[0].nbytes + problem[1].nbytes) // device_count}


def test_bytes_per_device_adds_every_shard_of_every_array():
    mesh = mesh_for("TP", *make_problem()[::2])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data", "model"))
    data, model = mesh.shape["data"], mesh.shape["model"]
    a = jax.device_put(jnp.ones((2 * data, 4 * model)), sharding)  # 8 float32 per device
    b = jax.device_put(
        jnp.ones(3, jnp.int8), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    )
    assert bytes_per_device([a, {"b": b}]) == dict.fromkeys(range(data * model), 8 * 4 + 3)


def test_the_compiled_steps_communicate_as_each_strategy_should(device_count):
    found = {m.strategy: m.collectives for m in compare(*make_problem(), LR, repeats=1)}
    if device_count == 1:
        # XLA keeps shard_map's collectives on one device, each among that device alone.
        assert {c.groups for cs in found.values() for c in cs} <= {"{{0}}"}
        return
    # DP: one all-reduce of both whole gradients over "data".
    assert [(c.kind, c.result, c.nbytes) for c in found["DP"]] == [
        ("all-reduce", "(f32[16,64], f32[64,8])", 6144)
    ]
    # FSDP: the weights gathered whole (forward), their gradients reduce-scattered back.
    fsdp = sorted((c.kind, c.nbytes) for c in found["FSDP"])
    assert fsdp == [
        ("all-gather", 2048),
        ("all-gather", 4096),
        ("reduce-scatter", 256),
        ("reduce-scatter", 512),
    ]
    # TP: the forward psum of the (16 rows, 8 outputs) shares over "model", and the
    # gradients of this device's hidden units summed over "data".
    tp = [(c.kind, c.result) for c in found["TP"]]
    assert sorted(tp) == [("all-reduce", "(f32[16,16], f32[16,8])"), ("all-reduce", "f32[16,8]")]


def test_the_table_and_the_chart_give_every_figure_measured():
    measured = compare(*make_problem(), LR, repeats=2)
    table = markdown_table(measured)
    picture = chart(measured)
    for m in measured:
        assert f"| {m.strategy} |" in table
        assert f"{m.param_bytes:,}" in table
        assert f"{m.strategy} {m.param_bytes:,} B" in picture.alt
        assert f"{m.strategy} {m.grad_bytes:,} B" in picture.alt
        assert f"{m.strategy} {m.step_seconds * 1e3:.2f} ms" in picture.alt
        assert f"| {len(m.collectives)} | {m.collective_bytes:,} |" in table
    assert picture.svg.lstrip().startswith("<?xml")
    assert 'alt="Bar charts comparing DP, FSDP, TP.' in picture._repr_html_()


def test_the_memory_analysis_counts_what_each_device_is_given_and_returns():
    w1, w2, x, y = make_problem()
    for m in compare(w1, w2, x, y, LR, repeats=1):
        rows = math.prod(m.mesh.values()) // m.mesh.get("model", 1)  # devices splitting x, y
        assert m.memory["argument"] == m.param_bytes + (x.nbytes + y.nbytes) // rows + 4
        # The new w1 and w2, and the tuple that returns them: 8 bytes per entry on CPU.
        assert m.memory["output"] == m.param_bytes + 2 * 8
        assert m.memory["temp"] > 0
        assert m.memory["peak"] >= m.memory["argument"]


def test_measure_times_a_step_and_returns_the_new_parameters():
    problem = make_problem(seed=2)
    m = measure("TP", *problem, LR, repeats=3)
    assert m.step_seconds > 0
    assert_close(m.params, oracle_step(*problem, LR))


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (("ZeRO",), ValueError, "strategy must be one of 'DP', 'FSDP', 'TP', got 'ZeRO'"),
        (("DP", np.ones((3, 4), np.float32)), ValueError, "x has 16 columns but w1 has 3 rows"),
        (("DP", None, np.ones((5, 8), np.float32)), ValueError, "w2 has 5 rows but w1 has 64"),
        (("DP", None, None, None, np.ones((32, 3), np.float32)), ValueError, "y must have shape"),
        (("DP", np.ones((16, 64), np.int32)), TypeError, "w1 must hold floating-point numbers"),
        (("DP", None, None, [[1.0]]), TypeError, "x must be a 2-D array"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(args, error, words):
    problem = list(make_problem())
    strategy, *given_args = args
    for i, value in enumerate(given_args):
        if value is not None:
            problem[i] = value
    with pytest.raises(error, match=words):
        sgd_step(strategy, *problem, LR)


@pytest.mark.parametrize(
    ("lr", "error"), [(math.nan, ValueError), (math.inf, ValueError), ("0.1", TypeError)]
)
def test_a_learning_rate_that_is_not_a_finite_number_is_refused(lr, error):
    with pytest.raises(error, match="lr must be"):
        sgd_step("FSDP", *make_problem(), lr)


def test_repeats_must_be_a_count():
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        measure("DP", *make_problem(), LR, repeats=0)
