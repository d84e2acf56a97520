"""Pipeline schedules: every step where its dependencies allow, and the figures read off them.

Each schedule is checked against the rules a pipeline must keep, written out here
independently of the module: every (microbatch, chunk) runs forward once and backward
once on the device that holds the chunk, a device runs one step at a time, a forward
step comes after the previous chunk's, a backward step after the next chunk's; then
the bubble and the activations against the closed forms of the papers.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shard_tutorial.pipeline_schedules import from_ticks, schedule, schedule_picture

SIZES = [(1, 1), (2, 2), (4, 8), (4, 3), (8, 8), (3, 12)]


def _check_rules(plan):
    n, m, v = plan.devices, plan.microbatches, plan.chunks
    end = {}
    for step in plan.steps:
        virtual = step.chunk * n + step.device  # chunk c of device d: layers' block c n + d
        key = (step.kind, step.microbatch, virtual)
        assert key not in end, key  # each step once
        end[key] = step.start + 1
    assert len(end) == 2 * m * n * v if any(s.kind == "B" for s in plan.steps) else m * n * v
    busy = [(s.device, s.start) for s in plan.steps]
    assert len(set(busy)) == len(busy)  # one step at a time per device
    for (kind, micro, virtual), finish in end.items():
        start = finish - 1
        if kind == "F" and virtual > 0:
            assert start >= end[("F", micro, virtual - 1)]
        if kind == "B":
            after = ("B", micro, virtual + 1) if virtual < n * v - 1 else ("F", micro, virtual)
            assert start >= end[after]
            assert start >= end[("F", micro, virtual)]


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("kind", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_keep_the_rules_and_take_2_m_plus_n_minus_1_steps(kind, n, m):
    plan = schedule(kind, n, m)
    _check_rules(plan)
    assert plan.span == 2 * (m + n - 1)  # forward and backward, each M + n - 1 long
    assert plan.bubble == pytest.approx((n - 1) / (m + n - 1))


@pytest.mark.parametrize(("n", "m"), SIZES)
def test_gpipe_holds_every_microbatch_and_1f1b_at_most_n_minus_d(n, m):
    assert schedule("gpipe", n, m).activations().tolist() == [float(m)] * n
    expected = [float(min(n - d, m)) for d in range(n)]
    assert schedule("1f1b", n, m).activations().tolist() == expected


@pytest.mark.parametrize(("n", "m", "v"), [(2, 2, 2), (4, 8, 2), (4, 4, 3), (2, 6, 4)])
def test_interleaved_keeps_the_rules_with_a_bubble_v_times_smaller(n, m, v):
    plan = schedule("interleaved", n, m, chunks=v)
    _check_rules(plan)
    # Megatron-LM (Narayanan et al. 2021, section 2.2.2): the bubble is (n - 1) steps
    # of 1 / v the length, over v M steps of work.
    assert plan.bubble == pytest.approx((n - 1) / (v * m + n - 1))
    # Device 0 holds 2(n - 1) + (v - 1) n + 1 chunks' activations at its peak.
    assert plan.activations()[0] == pytest.approx(min(2 * (n - 1) + (v - 1) * n + 1, v * m) / v)


def test_the_pages_figures():
    gpipe, one = schedule("gpipe", 4, 8), schedule("1f1b", 4, 8)
    inter = schedule("interleaved", 4, 8, chunks=2)
    assert (gpipe.span, one.span, inter.span) == (22, 22, 38)
    assert inter.activations()[0] == 5.5 == 4 * (1 + 3 / 8)  # n (1 + (n - 1) / (n v))


def test_the_grid_of_a_two_stage_gpipe():
    rows = [
        ["." if s is None else f"{s.kind}{s.microbatch}" for s in row]
        for row in schedule("gpipe", 2, 3).grid()
    ]
    assert rows == [
        ["F0", "F1", "F2", ".", ".", "B0", "B1", "B2"],
        [".", "F0", "F1", "F2", "B0", "B1", "B2", "."],
    ]


def test_a_recorded_forward_schedule_is_read_as_it_ran():
    n, m = 3, 4
    ticks = np.full((n, m + n - 1), -1)
    for s, t in itertools.product(range(n), range(m + n - 1)):
        if 0 <= t - s < m:
            ticks[s, t] = t - s
    plan = from_ticks(ticks)
    _check_rules(plan)
    assert (plan.devices, plan.microbatches, plan.span) == (3, 4, 6)
    assert plan.bubble == pytest.approx(2 / 6)
    assert plan.activations().tolist() == [1.0, 1.0, 1.0]  # forward only: one at a time


# matplotlib 3.8 (the oldest stack) parses its rc file at import with pyparsing calls
# that pyparsing 3.3 deprecates; newer matplotlib does not. Only that warning is let by.
@pytest.mark.filterwarnings("ignore:'parseString' deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:'[a-zA-Z]+' deprecated - use:DeprecationWarning")
def test_the_picture_says_what_runs_when():
    picture = schedule_picture(schedule("gpipe", 2, 2))
    assert picture.svg.lstrip().startswith("<?xml")
    assert picture.alt == (
        "GPipe on 2 devices, 2 microbatches, 6 steps; bubble 33%. "
        "Device 0: F0, F1, idle, idle, B0, B1. Device 1: idle, F0, F1, B0, B1, idle."
    )
    assert 'class="pipeline-schedule"' in picture._repr_html_()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("zigzag", 2, 2), "kind must be one of"),
        (("gpipe", 0, 2), "devices must be a whole number of at least 1"),
        (("1f1b", 2, 0), "microbatches must be a whole number of at least 1"),
        (("gpipe", 2, 2, 2), "chunks must be 1 for 'gpipe'"),
        (("interleaved", 4, 6, 2), "microbatches a multiple of devices"),
        (("interleaved", 4, 8, 1), "needs chunks >= 2"),
    ],
)
def test_bad_arguments_are_named(args, words):
    with pytest.raises(ValueError, match=words):
        schedule(*args)


def test_ticks_must_be_two_dimensional():
    with pytest.raises(ValueError, match="ticks must be 2-D"):
        from_ticks(np.zeros(3, int))
