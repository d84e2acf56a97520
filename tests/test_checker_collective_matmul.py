"""The checker on the two collective matmul problems: right solutions pass, eager and
under jit; each classic mistake fails with its explanation; each shortcut (gathering
first, one device, the collective the problem avoids, a dead collective, more than the
ring's bytes, the package's own function) gets the verdict it deserves.

Judged in this process (judging.check_here and judged: the checker's worker step and
judge, no subprocess), at the suite's device count, 1 or 8; each mistake on the case
of 16 rows, which the contract splits over 8 devices on 8.
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
from judging import check_here, judged

from shard_tutorial import PROBLEMS, axis_mesh
from shard_tutorial.checking.worker import load_solution

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

AG = "collective_matmul_all_gather"
RS = "collective_matmul_reduce_scatter"
SEED = 17

# --- the all-gather collective matmul, as a reader writes it -------------------------

AG_TEMPLATE = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


def local(x, w):
    n = jax.lax.axis_size("model")
    me = jax.lax.axis_index("model")
    rows = x.shape[0]
    {body}


def collective_matmul_all_gather(x, w):
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))
    x = jax.device_put(x, NamedSharding(mesh, P("model", None)))
    w = jax.device_put(w, NamedSharding(mesh, P(None, "model")))
    f = jax.shard_map(
        local, mesh=mesh, in_specs=(P("model", None), P(None, "model")),
        out_specs=P(None, "model"),
    )
    return {call}
"""

AG_RIGHT = """
    def step(i, carry):
        out, block = carry
        block = jax.lax.ppermute(block, "model", [(j, (j - 1) % n) for j in range(n)])
        held = (me + i) % n
        return jax.lax.dynamic_update_slice_in_dim(out, block @ w, held * rows, 0), block

    out = jnp.zeros((n * rows, w.shape[1]), x.dtype)
    out = jax.lax.dynamic_update_slice_in_dim(out, x @ w, me * rows, 0)
    return jax.lax.fori_loop(1, n, step, (out, x), unroll=True)[0]"""

# No ring: each device multiplies only the block it started with.
AG_NO_RING = """
    out = jnp.zeros((n * rows, w.shape[1]), x.dtype)
    out = jax.lax.dynamic_update_slice_in_dim(out, x @ w, me * rows, 0)
    return jax.lax.fori_loop(
        1, n, lambda i, o: o + 0 * jax.lax.ppermute(o, "model", [(j, (j + 1) % n) for j in range(n)]),
        out, unroll=True)"""

# The ring turned the other way (send to i + 1), the rows written as if it had not.
AG_WRONG_WAY = AG_RIGHT.replace("(j - 1) % n", "(j + 1) % n")

# Gather first: one all-gather, what the problem avoids.
AG_GATHER = """
    return jax.lax.all_gather(x, "model", axis=0, tiled=True) @ w"""


def _write(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def _ag(tmp_path, body, call="f(x, w)"):
    return _write(tmp_path, AG, AG_TEMPLATE.format(body=body.strip("\n").lstrip(), call=call))


def _judge_file(name, path):
    """The verdict on the file's solution for the case of 16 rows (8 devices on 8)."""
    problem = PROBLEMS[name]
    solution = load_solution({"kind": "file", "path": str(path), "function": name})
    return judged(problem, solution, next(c for c in problem.cases if c.label.startswith("S=16")))


@pytest.mark.parametrize("call", ["f(x, w)", "jax.jit(f)(x, w)"], ids=["eager", "jit"])
def test_a_readers_right_all_gather_matmul_passes(tmp_path, call):
    # The cases of a right answer of the corpus (tests/judging.py: check_here's lean).
    lean = True if "jit" in call else "eager"
    report = check_here(AG, _ag(tmp_path, AG_RIGHT, call), seed=SEED, lean=lean)
    assert report.passed, str(report)


def test_the_block_never_passed_on_is_explained(tmp_path, device_count):
    status, message = _judge_file(AG, _ag(tmp_path, AG_NO_RING))
    if device_count == 1:
        assert status == "pass", message  # one block: all of x
        return
    assert status == "fail", message
    assert "only the rows of the block of x it started with (2 of 16), on 8 devices" in message


def test_the_ring_turned_the_wrong_way_is_explained(tmp_path, device_count):
    status, message = _judge_file(AG, _ag(tmp_path, AG_WRONG_WAY))
    if device_count == 1:
        assert status == "pass", message
        return
    assert status == "fail", message
    assert "the ring passes blocks one way and the rows are written as if" in message


def test_gathering_x_first_is_refused_by_its_technique(tmp_path, device_count):
    status, message = _judge_file(AG, _ag(tmp_path, AG_GATHER))
    if device_count == 1:  # a gather over one device moves nothing: shard_map alone is asked
        assert status == "pass", message
        return
    assert status == "technique", message
    assert "no collective-permute (ppermute)" in message
    assert "runs 1 all-gather" in message


# --- the reduce-scatter collective matmul --------------------------------------------

RS_TEMPLATE = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


def local(h, w):
    n = jax.lax.axis_size("model")
    me = jax.lax.axis_index("model")
    rows = h.shape[0] // n

    def mine(b):
        return jax.lax.dynamic_slice_in_dim(h, b * rows, rows, 0) @ w

    {body}


def collective_matmul_reduce_scatter(h, w):
    mesh = axis_mesh("model", math.gcd(*h.shape))
    h = jax.device_put(h, NamedSharding(mesh, P(None, "model")))
    w = jax.device_put(w, NamedSharding(mesh, P("model", None)))
    f = jax.shard_map(
        local, mesh=mesh, in_specs=(P(None, "model"), P("model", None)),
        out_specs=P("model", None),
    )
    return {call}
"""

RS_RIGHT = """
    def step(i, total):
        total = jax.lax.ppermute(total, "model", [(j, (j + 1) % n) for j in range(n)])
        return total + mine((me - 1 - i) % n)

    return jax.lax.fori_loop(1, n, step, mine((me - 1) % n), unroll=True)"""

# The running sums start on the device they belong to, so they end one device off.
RS_OFF_BY_ONE = RS_RIGHT.replace("mine((me - 1 - i) % n)", "mine((me - i) % n)").replace(
    "mine((me - 1) % n)", "mine(me)"
)

# No running sum: each device keeps its own partial sum of its own rows.
RS_NO_SUM = """
    return jax.lax.fori_loop(
        1, n, lambda i, t: t + 0 * jax.lax.ppermute(t, "model", [(j, (j + 1) % n) for j in range(n)]),
        mine(me), unroll=True)"""

# The collective the problem avoids: one psum_scatter of the whole partial product.
RS_PSUM_SCATTER = """
    return jax.lax.psum_scatter(h @ w, "model", scatter_dimension=0, tiled=True)"""

# An all-reduce, then each device keeps its rows.
RS_ALL_REDUCE = """
    return jax.lax.dynamic_slice_in_dim(jax.lax.psum(h @ w, "model"), me * rows, rows, 0)"""


def _rs(tmp_path, body, call="f(h, w)"):
    return _write(tmp_path, RS, RS_TEMPLATE.format(body=body.strip("\n").lstrip(), call=call))


@pytest.mark.parametrize("call", ["f(h, w)", "jax.jit(f)(h, w)"], ids=["eager", "jit"])
def test_a_readers_right_reduce_scatter_matmul_passes(tmp_path, call):
    lean = True if "jit" in call else "eager"  # as a right answer of the corpus
    report = check_here(RS, _rs(tmp_path, RS_RIGHT, call), seed=SEED, lean=lean)
    assert report.passed, str(report)


def test_running_sums_that_end_one_device_off_are_explained(tmp_path, device_count):
    status, message = _judge_file(RS, _rs(tmp_path, RS_OFF_BY_ONE))
    if device_count == 1:
        assert status == "pass", message
        return
    assert status == "fail", message
    assert "holds the sum of block b + 1 (of 8 blocks)" in message
    assert "ended on the wrong devices" in message


def test_partial_sums_never_added_are_explained(tmp_path, device_count):
    status, message = _judge_file(RS, _rs(tmp_path, RS_NO_SUM))
    if device_count == 1:
        assert status == "pass", message
        return
    assert status == "fail", message
    assert "one device's partial sum only (its 2 of the 16 columns of h), on 8 devices" in message


@pytest.mark.parametrize(
    ("body", "words"),
    [(RS_PSUM_SCATTER, "1 reduce-scatter"), (RS_ALL_REDUCE, "1 all-reduce")],
    ids=["psum_scatter", "psum"],
)
def test_the_collectives_the_ring_replaces_are_refused(tmp_path, body, words, device_count):
    status, message = _judge_file(RS, _rs(tmp_path, body))
    if device_count == 1:  # a collective over one device combines nothing: none is judged
        assert status == "pass", message
        return
    assert status == "technique", message
    assert words in message, message


# --- shortcuts, judged as functions --------------------------------------------------


def _ag_mesh(x, w):
    return axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))


def ag_on_one_device(x, w):
    """The product on one device, then laid out as asked."""
    one = jax.devices()[0]
    y = jax.device_put(np.asarray(x), one) @ jax.device_put(np.asarray(w), one)
    return jax.device_put(y, NamedSharding(_ag_mesh(x, w), P(None, "model")))


def ag_dead_ring(x, w):
    """A right ring run and thrown away; the answer computed on one device."""
    jax.block_until_ready(ag_ring(x, w))
    one = jax.devices()[0]
    return jax.device_put(np.asarray(x), one) @ jax.device_put(np.asarray(w), one)


def ag_wraps_the_reference(x, w):
    from shard_tutorial import collective_matmul_all_gather  # noqa: PLC0415

    return collective_matmul_all_gather(x, w) * 1


def _ag_local(x, w, *, pass_w_too=False):
    n = jax.lax.axis_size("model")
    me = jax.lax.axis_index("model")
    rows = x.shape[0]
    ring = [(j, (j - 1) % n) for j in range(n)]

    def step(i, carry):
        out, block, cols = carry
        block = jax.lax.ppermute(block, "model", ring)
        if pass_w_too:
            cols = jax.lax.ppermute(cols, "model", ring)  # sent, never needed
        held = (me + i) % n
        return jax.lax.dynamic_update_slice_in_dim(out, block @ w, held * rows, 0), block, cols

    out = jnp.zeros((n * rows, w.shape[1]), x.dtype)
    out = jax.lax.dynamic_update_slice_in_dim(out, x @ w, me * rows, 0)
    out, _, cols = jax.lax.fori_loop(1, n, step, (out, x, w), unroll=True)
    return out + 0 * cols.sum()  # keeps the columns' ring alive


def _ag_call(x, w, **options):
    mesh = _ag_mesh(x, w)
    f = jax.shard_map(
        functools.partial(_ag_local, **options),
        mesh=mesh,
        in_specs=(P("model", None), P(None, "model")),
        out_specs=P(None, "model"),
    )
    return f(
        jax.device_put(x, NamedSharding(mesh, P("model", None))),
        jax.device_put(w, NamedSharding(mesh, P(None, "model"))),
    )


def ag_ring(x, w):
    """Right: the ring, as functions of a test rather than a reader's file."""
    return _ag_call(x, w)


def ag_passes_x_and_w(x, w):
    """Over budget: passes w's columns round the ring too, alongside x's rows."""
    return _ag_call(x, w, pass_w_too=True)


# (problem, shortcut, status on 8 devices, words of its message, status on 1 device)
SHORTCUTS = [
    (AG, ag_ring, "pass", "", "pass"),
    (AG, ag_on_one_device, "technique", "not with jax.shard_map", "technique"),
    (AG, ag_dead_ring, "placement", "lies on 1 device", None),
    (AG, ag_wraps_the_reference, "reference", "package's own", "reference"),
    (AG, ag_passes_x_and_w, "budget", "sends", "pass"),
]


@pytest.mark.parametrize(
    ("name", "shortcut", "status", "words", "on_one"),
    SHORTCUTS,
    ids=[f.__name__ for _, f, *_ in SHORTCUTS],
)
def test_each_shortcut_gets_the_verdict_it_deserves(
    name, shortcut, status, words, on_one, device_count
):
    problem = PROBLEMS[name]
    case = next(c for c in problem.cases if c.label.startswith("S=16"))
    got, message = judged(problem, shortcut, case)
    if device_count == 1:
        if on_one is not None:
            assert got == on_one, message
        return
    assert (got, words in message) == (status, True), message


# --- the budgets are tight -----------------------------------------------------------


@pytest.mark.parametrize("name", [AG, RS])
def test_the_budget_is_one_block_on_each_of_n_minus_1_hops(name, device_count):
    # That the reference sends exactly this is tests/test_budgets.py's, for every budget.
    problem = PROBLEMS[name]
    for case in problem.cases:
        args = problem.arranged(case)
        n = problem.mesh_shape(case, device_count)[0]
        first, second = case.args
        rows, width = first.shape[0], (first.shape[1] if name == AG else second.shape[1])
        itemsize = np.result_type(first.dtype, second.dtype).itemsize if name == RS else 4
        limit = problem.budget.limits(args)["sent"]
        assert limit == (n - 1) * (rows // n) * width * itemsize, case.label


def _collect_every_block_then_multiply(x, w):
    """n - 1 ppermutes that gather x block by block, then one matmul: the bytes of the ring."""
    mesh = axis_mesh("model", math.gcd(x.shape[0], w.shape[1]))

    def body(x_block, w_columns):
        n, me = jax.lax.axis_size("model"), jax.lax.axis_index("model")
        blocks, block = [x_block], x_block
        for _ in range(n - 1):
            block = jax.lax.ppermute(block, "model", [(j, (j - 1) % n) for j in range(n)])
            blocks.append(block)  # block me + i arrives at step i
        whole = jnp.stack(blocks)[(jnp.arange(n) - me) % n].reshape(-1, x_block.shape[1])
        return whole @ w_columns

    specs = (P("model", None), P(None, "model"))
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=P(None, "model")))(x, w)


def test_collecting_every_block_before_multiplying_is_over_the_held_budget(device_count):
    problem = PROBLEMS[AG]
    (big,) = [c for c in problem.cases if c.label.startswith("S=256")]
    status, message = judged(problem, _collect_every_block_then_multiply, big)
    if device_count == 1:  # one device holds x whole by the contract: nothing to judge
        assert status == "pass", message
        return
    assert status == "budget", message
    assert "collecting every block before multiplying holds all of x" in message
    assert judged(problem, _collect_every_block_then_multiply, problem.cases[2])[0] == "pass"
