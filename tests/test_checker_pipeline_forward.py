"""The checker on pipeline_forward: a right solution passes (the corpus holds eager ones);
each classic mistake of its page fails with its explanation; each shortcut gets the
verdict it deserves.

Judged in this process (judging.check_here and judged: the checker's worker step and its
judge, no subprocess), at the suite's device count, 1 or 8; the checker's isolation of a
reader's code is tested in test_checker.py, where the reference's file passes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from judging import check_here, judged

from shard_tutorial import PROBLEMS, axis_mesh

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

NAME = "pipeline_forward"
PROBLEM = PROBLEMS[NAME]
SEED = 13
SPLIT = "M=4, L=8: 8 stages of 1 layer"

# A reader's solution; each mistake below changes one piece of it.
SOLUTION = """\
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


def layers(h, w_block):
    for w in w_block:
        h = jnp.tanh(h @ w)
    return h


def stage_program(x, w_block):
    stage = jax.lax.axis_index("stage")
    n = jax.lax.axis_size("stage")
    m = x.shape[0]
    h = jnp.zeros(x.shape[1:], x.dtype)
    outputs = jnp.zeros_like(x)
    for tick in range(TICKS):
        if tick < m:
            h = jnp.where(stage == 0, x[tick], h)
        h = layers(h, w_block)
        if tick >= n - 1:
            done = tick - (n - 1)
            outputs = outputs.at[done].set(jnp.where(stage == n - 1, h, outputs[done]))
        h = SEND
    return FINISH


def pipeline_forward(x, w):
    mesh = axis_mesh("stage", w.shape[0])
    x = jax.device_put(x, NamedSharding(mesh, P()))
    w = jax.device_put(w, NamedSharding(mesh, P("stage")))
    return WRAP(jax.shard_map(
        stage_program, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P(), CHECK
    ))(x, w)
"""

PARTS = {
    "TICKS": "m + n - 1",
    "SEND": 'jax.lax.ppermute(h, "stage", [(i, i + 1) for i in range(n - 1)])',
    "FINISH": 'jax.lax.psum(jnp.where(stage == n - 1, outputs, 0), "stage")',
    "WRAP": "jax.jit",  # the eager solution is judged on two cases only: it runs op by op
    "CHECK": "check_vma=True",
}


def source(**changes: str) -> str:
    text = SOLUTION
    for key, value in {**PARTS, **changes}.items():
        text = text.replace(key, value)
    return text


def _check(tmp_path, *, lean=False, **changes):
    path = tmp_path / f"{NAME}.py"
    path.write_text(source(**changes))
    report = check_here(NAME, path, seed=SEED, lean=lean)
    return report, " ".join(str(report).split())  # the report wraps its lines


def test_a_readers_right_solution_passes_jitted(tmp_path):
    report, text = _check(tmp_path, lean=True)  # a right answer's cases (judging.py)
    assert report.passed, text


def test_stages_that_read_x_themselves_fail_with_its_explanation(tmp_path, device_count):
    # Stage s reads microbatch t - s from x itself at tick t: no activation is passed.
    report, text = _check(tmp_path, SEND="x[jnp.clip(tick + 1 - stage, 0, m - 1)]")
    (run,) = report.runs
    if device_count == 1:  # one stage holds every layer: nothing to pass on
        assert run.passed, text
        return
    assert not run.passed
    assert "This is x through the last 1 of the 2 layers only" in text  # the statement's
    assert "did not pass their activations on" in text


def test_one_tick_too_few_fails_on_every_device_count(tmp_path):
    report, text = _check(tmp_path, TICKS="m + n - 2")
    (run,) = report.runs
    assert not run.passed
    assert "The last 1 of the 2 microbatches came out as 0" in text  # the statement's
    assert "stopped 1 tick early" in text


def test_no_psum_leaves_zeros_on_the_first_stage(tmp_path, device_count):
    report, text = _check(tmp_path, FINISH="outputs", CHECK="check_vma=False")
    (run,) = report.runs
    if device_count == 1:
        assert {r.status for r in run.results} == {"pass"}, text  # one stage: it is the last
        return
    assert not run.passed
    assert "the devices hold different values" in text
    assert "Every output is 0" in text


def test_gathering_w_and_computing_every_layer_everywhere_is_not_pipelining(tmp_path, device_count):
    whole = "layers(x, jax.lax.all_gather(w_block, 'stage', tiled=True))"
    # No activation passed; all_gather's result varies over "stage" for JAX's type check.
    report, text = _check(tmp_path, SEND="h", FINISH=whole, CHECK="check_vma=False")
    (run,) = report.runs
    if device_count == 1:  # one stage: nothing to gather or pass on, shard_map alone asked
        assert run.passed, text
        return
    assert {r.status for r in run.results} == {"technique"}, text
    assert "collective-permute (ppermute)" in text


# --- shortcuts, judged case by case ---------------------------------------------------


def _layers(h, w_block):
    for w in w_block:
        h = jnp.tanh(h @ w)
    return h


def _program(finish="psum", gather_w=False):
    def program(x, w_block):
        stage, n = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
        if gather_w:  # the whole of w on every stage, then each stage picks its block
            whole = jax.lax.all_gather(w_block, "stage", tiled=True)
            size = w_block.shape[0]
            w_block = jax.lax.dynamic_slice_in_dim(whole, stage * size, size)
        m = x.shape[0]
        h, outputs = jnp.zeros(x.shape[1:], x.dtype), jnp.zeros_like(x)
        forward = [(i, i + 1) for i in range(n - 1)]
        for tick in range(m + n - 1):
            if tick < m:
                h = jnp.where(stage == 0, x[tick], h)
            h = _layers(h, w_block)
            if tick >= n - 1:
                done = tick - (n - 1)
                outputs = outputs.at[done].set(jnp.where(stage == n - 1, h, outputs[done]))
            if tick < m + n - 2:
                h = jax.lax.ppermute(h, "stage", forward)
        last = jnp.where(stage == n - 1, outputs, 0)
        if finish == "psum":
            return jax.lax.psum(last, "stage")
        if finish == "ring":  # the last stage's outputs passed round the ring, n - 1 times
            total, moving = last, last
            for _ in range(n - 1):
                moving = jax.lax.ppermute(moving, "stage", [(i, (i + 1) % n) for i in range(n)])
                total = total + moving
            return total
        every = jax.lax.all_gather(outputs, "stage")  # every stage's copy, (n, M, B, D)
        return every[n - 1]

    return program


def _run(x, w, mesh, program):
    x = jax.device_put(x, NamedSharding(mesh, P()))
    w = jax.device_put(w, NamedSharding(mesh, P("stage")))
    # Jitted: the verdicts below are about what the program communicates, not about
    # eager execution (the right solution is judged eager too, above), and an eager
    # shard_map compiles each operation on its own (about 200 programs per case).
    return jax.jit(
        jax.shard_map(
            program, mesh=mesh, in_specs=(P(), P("stage")), out_specs=P(), check_vma=False
        )
    )(x, w)


def right_jit(x, w):
    mesh = axis_mesh("stage", w.shape[0])
    return jax.jit(lambda x, w: _run(x, w, mesh, _program()))(x, w)


def on_one_device(x, w):
    """The right program, on a mesh of one stage."""
    return _run(x, w, axis_mesh("stage", 1), _program())


def _ppermute_of_x(x, w):
    """A shard_map over the stages that only moves x round them."""

    def program(x, _w_block):
        n = jax.lax.axis_size("stage")
        return jax.lax.ppermute(x, "stage", [(i, (i + 1) % n) for i in range(n)])

    return _run(x, w, axis_mesh("stage", w.shape[0]), program)


def dead_ppermute(x, w):
    """The network on one device, plus a ppermute run and thrown away."""
    _ppermute_of_x(x, w).block_until_ready()
    return jax.jit(_layers)(jnp.asarray(x), jnp.asarray(w))


def zero_times_ppermute(x, w):
    """The network on one device, plus 0 times a ppermute's result."""
    # (jitted: the checker keeps 8 earlier arrays shaped like the answer, and an eager loop
    # of 8 layers makes 16, the one with the answer's values among the ones it drops)
    return jax.jit(_layers)(jnp.asarray(x), jnp.asarray(w)) + 0 * _ppermute_of_x(x, w)


def wraps_the_reference(x, w):
    from shard_tutorial import pipeline_forward  # noqa: PLC0415

    return pipeline_forward(x, w) * 1


def outputs_round_the_ring(x, w):
    """Right, but the outputs sent round the ring by n - 1 ppermutes, not one psum."""
    return _run(x, w, axis_mesh("stage", w.shape[0]), _program(finish="ring"))


def outputs_gathered_from_every_stage(x, w):
    """Right, but every stage's copy of the outputs all-gathered to keep the last."""
    return _run(x, w, axis_mesh("stage", w.shape[0]), _program(finish="gather"))


def w_gathered_then_pipelined(x, w):
    """Right, pipelined, but each stage gathers the whole of w to pick its block."""
    return _run(x, w, axis_mesh("stage", w.shape[0]), _program(gather_w=True))


def by_psum_not_ppermute(x, w):
    """Right, but the activation handed on by a psum (every stage gets every one)."""

    def program(x, w_block):
        stage, n = jax.lax.axis_index("stage"), jax.lax.axis_size("stage")
        h = x
        for s in range(n):  # stage s runs its layers on every microbatch, then shares them
            h = jax.lax.psum(jnp.where(stage == s, _layers(h, w_block), 0), "stage")
        return h

    return _run(x, w, axis_mesh("stage", w.shape[0]), program)


SMALL_OUTPUT = "M=2, L=8: the bubble is most of the schedule"  # w outweighs 8 output copies
LAST = "M=8, B=4, D=16, L=8"

# (shortcut, case, verdict on 8 devices, words of its message, verdict on 1 device)
SHORTCUTS = [
    (right_jit, SPLIT, "pass", "", "pass"),
    (on_one_device, SPLIT, "placement", "on 1 device", "pass"),
    (dead_ppermute, SPLIT, "placement", "on 1 device", None),
    (zero_times_ppermute, SPLIT, "placement", "computed on 1 device", None),
    (wraps_the_reference, SPLIT, "reference", "package's own", "reference"),
    (by_psum_not_ppermute, SPLIT, "technique", "no collective-permute", "pass"),
    (w_gathered_then_pipelined, SMALL_OUTPUT, "technique", "never leave", "pass"),
    (outputs_round_the_ring, LAST, "budget", "sends 17,920 bytes", "pass"),
    (outputs_gathered_from_every_stage, LAST, "budget", "sends 17,920 bytes", "pass"),
]


@pytest.mark.parametrize(
    ("shortcut", "label", "status", "words", "on_one"),
    SHORTCUTS,
    ids=[s[0].__name__ for s in SHORTCUTS],
)
def test_each_shortcut_gets_the_verdict_it_deserves(
    shortcut, label, status, words, on_one, device_count
):
    (case,) = [c for c in PROBLEM.cases if c.label == label]
    got, message = judged(PROBLEM, shortcut, case)
    if device_count == 1:
        if on_one is not None:
            assert got == on_one, message
        return
    assert (got, words in message) == (status, True), message


def test_the_budget_is_what_the_right_solution_sends(device_count):
    # M=8, B=4, D=16 on 8 stages: 14 activations of 256 bytes, and one all-reduce of
    # 2,048 bytes (2 x 7/8 of it sent): 3,584 + 3,584 = 7,168 bytes per device.
    (case,) = [c for c in PROBLEM.cases if c.label == LAST]
    limits = PROBLEM.budget.limits(PROBLEM.arranged(case))
    assert limits["sent"] == (7_168 if device_count == 8 else 0)
    if device_count == 8:
        _, message = judged(PROBLEM, outputs_round_the_ring, case)
        assert "allows 7,168" in message  # 7 x 2,048 for the outputs instead of 3,584


def test_the_files_define_the_problems_function():
    for changes in ({}, {"TICKS": "m + n - 2"}, {"FINISH": "outputs"}):
        text = source(**changes)
        compile(text, NAME, "exec")
        assert f"def {NAME}(x, w):" in text
