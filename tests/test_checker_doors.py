"""The checker cannot be fooled through the doors it once had, and does not wrong right answers.

Each solution here is judged as the checker judges it (its worker step and its judge,
in this process: see judging.py), at this suite's device count, 1 or 8. Until the
judge read the program that produced the answer, every shortcut below passed and
several right solutions failed:

1. the technique was read from a second, traced call: code that showed shard_map to
   tracers and computed with NumPy otherwise passed; eager-only right code failed;
2. the technique was the presence of names: collectives thrown away, over one device,
   or besides an answer computed otherwise passed;
3. placement was judged from the output's spec alone: answers computed on one device
   passed, and right answers of jax.jit's were told they split no work;
4. the package's own reference passed, wrapped.

A right answer must pass on 1 device and on 8; a shortcut must fail on 8 devices,
where the contract asks for the work to be split, with the verdict that names it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from judging import judged

from shard_tutorial import PROBLEMS, data_mesh, usable_device_count
from shard_tutorial.problem import Case, Problem


def _split(x, mesh, spec=P("data")):
    return jax.device_put(x, NamedSharding(mesh, spec))


def _cases(problem: Problem, count: int = 2) -> list[Case]:
    """Cases whose mesh has several devices on 8 (and whose arrays are not empty)."""
    chosen = [
        case
        for case in problem.cases
        if math.prod(problem.mesh_shape(case, 8)) >= 4
        and all(np.size(a) > 0 for a in case.args if isinstance(a, np.ndarray))
    ]
    return chosen[:count]


# --- right solutions, written as a reader would -------------------------------------


def psum_eager(x):
    """Right, eager (no jit), with an input check on the host, a print, and an assert."""
    x = jnp.asarray(x)
    assert np.asarray(x).ndim == 1  # a host-side check of the input
    mesh = data_mesh(len(x))
    blocks = _split(x, mesh)
    assert blocks.sharding.spec[0] == "data"
    total = jax.shard_map(
        lambda b: jax.lax.psum(jnp.sum(b), "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
    )(blocks)
    print(float(total))
    return total.block_until_ready()


@jax.jit
def _psum_jitted(x):
    count = usable_device_count(x.shape[0])  # a mesh with Auto axes: jit's own choice
    mesh = Mesh(np.array(jax.devices()[:count]), ("data",))
    return jax.shard_map(
        lambda b: jax.lax.psum(jnp.sum(b), "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
    )(x)


def psum_jit(x):
    return _psum_jitted(x)


def psum_unchecked(x):
    """Right, with check_vma=False."""
    mesh = data_mesh(len(x))
    return jax.shard_map(
        lambda b: jax.lax.psum(jnp.sum(b), "data"),
        mesh=mesh, in_specs=P("data"), out_specs=P(), check_vma=False,
    )(_split(x, mesh))  # fmt: skip


def _printing_block_sums(b):
    jax.debug.print("block sum {s}", s=jnp.sum(b))
    return jax.lax.psum(jnp.sum(b), "data")


@jax.jit
def psum_debug_print(x):
    """Right, printing from inside shard_map: a call back to Python that computes nothing.

    (On an Auto mesh: jax 0.10 cannot print inside shard_map on Explicit axes.)
    """
    mesh = Mesh(np.array(jax.devices()[: usable_device_count(x.shape[0])]), ("data",))
    return jax.shard_map(_printing_block_sums, mesh=mesh, in_specs=P("data"), out_specs=P())(x)


def psum_scatter_right(x):
    mesh = data_mesh(math.gcd(*x.shape))
    return jax.shard_map(
        lambda b: jax.lax.psum_scatter(b.sum(0), "data", tiled=True),
        mesh=mesh, in_specs=P("data"), out_specs=P("data"),
    )(_split(x, mesh))  # fmt: skip


def all_to_all_right(x):
    mesh = data_mesh(math.gcd(*x.shape))
    return jax.shard_map(
        lambda b: jax.lax.all_to_all(b, "data", 1, 0, tiled=True).T,
        mesh=mesh, in_specs=P("data"), out_specs=P("data"),
    )(_split(x, mesh))  # fmt: skip


def _average(b):
    d = jax.lax.axis_size("data")
    left = jax.lax.ppermute(b[-1:], "data", [(i, (i + 1) % d) for i in range(d)])
    right = jax.lax.ppermute(b[:1], "data", [(i, (i - 1) % d) for i in range(d)])
    padded = jnp.concatenate([left, b, right])
    return (padded[:-2] + padded[1:-1] + padded[2:]) / 3


def ppermute_right(x):
    mesh = data_mesh(len(x))
    return jax.jit(jax.shard_map(_average, mesh=mesh, in_specs=P("data"), out_specs=P("data")))(
        _split(x, mesh)
    )


def all_gather_right(x):
    mesh = data_mesh(len(x))
    return jax.shard_map(
        lambda b: b[:, None] * jax.lax.all_gather(b, "data", tiled=True)[None, :],
        mesh=mesh, in_specs=P("data"), out_specs=P("data"),
    )(_split(x, mesh))  # fmt: skip


def _dp_local(w, b, x, y, lr):
    def loss(w, b):
        return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

    dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
    return w - lr * dw, b - lr * db


def dp_right(w, b, x, y, lr):
    mesh = data_mesh(x.shape[0])
    w, b = _split(w, mesh, P()), _split(b, mesh, P())
    step = jax.shard_map(
        _dp_local, mesh=mesh, in_specs=(P(), P(), P("data"), P("data"), P()),
        out_specs=(P(), P()),
    )  # fmt: skip
    return jax.jit(step)(w, b, _split(x, mesh), _split(y, mesh), jnp.float32(lr))


def _fsdp_local(w_rows, b, x, y, lr):
    def loss(w_rows, b):
        w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
        return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

    dw, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)
    return w_rows - lr * dw, b - lr * db


def fsdp_right(w, b, x, y, lr):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    step = jax.shard_map(
        _fsdp_local, mesh=mesh, in_specs=(P("data", None), P(), P("data"), P("data"), P()),
        out_specs=(P("data", None), P()),
    )  # fmt: skip
    args = (_split(w, mesh, P("data", None)), _split(b, mesh, P()), _split(x, mesh),
            _split(y, mesh), jnp.float32(lr))  # fmt: skip
    return step(*args)


def _tp_mesh(x, w1):
    from shard_tutorial.meshes import data_model_shape  # noqa: PLC0415

    data, model = data_model_shape(x.shape[0], w1.shape[1])
    devices = np.array(jax.devices()[: data * model]).reshape(data, model)
    return Mesh(devices, ("data", "model"))


def tp_right(x, w1, w2):
    mesh = _tp_mesh(x, w1)
    body = jax.shard_map(
        lambda x, w1, w2: jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "model"),
        mesh=mesh, in_specs=(P("data", None), P(None, "model"), P("model", None)),
        out_specs=P("data", None),
    )  # fmt: skip
    return jax.jit(body)(
        _split(x, mesh, P("data", None)),
        _split(w1, mesh, P(None, "model")),
        _split(w2, mesh, P("model", None)),
    )


RIGHT = [
    ("shard_map_psum", psum_eager),
    ("shard_map_psum", psum_jit),
    ("shard_map_psum", psum_unchecked),
    ("shard_map_psum", psum_debug_print),
    ("shard_map_psum_scatter", psum_scatter_right),
    ("shard_map_all_to_all", all_to_all_right),
    ("shard_map_ppermute", ppermute_right),
    ("shard_map_all_gather", all_gather_right),
    ("data_parallel_sgd_step", dp_right),
    ("fsdp_sgd_step", fsdp_right),
    ("tensor_parallel_mlp", tp_right),
]


@pytest.mark.parametrize(("name", "solution"), RIGHT, ids=[f.__name__ for _, f in RIGHT])
def test_right_solutions_in_every_style_pass(name, solution):
    problem = PROBLEMS[name]
    for case in [*_cases(problem), problem.cases[0]]:
        assert judged(problem, solution, case)[0] == "pass", case.label


# --- shortcuts -----------------------------------------------------------------------


def psum_host_unless_traced(x):
    """Door 1: shard_map and psum for tracers, NumPy for the values."""
    if isinstance(x, jax.core.Tracer):
        return _psum_jitted(x)
    return jnp.asarray(np.asarray(x).sum(dtype=np.float64).astype(x.dtype))


def psum_blocks_summed_by_a_callback(x):
    """Door 1: shard_map and psum, but each block summed by NumPy in a host callback."""
    mesh = data_mesh(len(x))

    def body(b):
        on_host = jax.pure_callback(
            lambda a: np.asarray(a.sum(), a.dtype), jax.ShapeDtypeStruct((), b.dtype), b
        )
        return jax.lax.psum(on_host, "data")

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P())(_split(x, mesh))


def psum_dead_collective(x):
    """Door 2: a shard_map psum run and thrown away; the sum computed on one device."""
    psum_eager(x)
    return jnp.sum(jnp.asarray(x))


def psum_one_device_mesh(x):
    """Door 2: shard_map and psum, on a mesh of one device."""
    mesh = data_mesh(1)
    return jax.shard_map(
        lambda b: jax.lax.psum(jnp.sum(b), "data"), mesh=mesh, in_specs=P("data"), out_specs=P()
    )(_split(x, mesh))


def psum_jit_automatic(x):
    """Door 3: right values by jit's automatic partitioning, no shard_map."""
    mesh = data_mesh(len(x))
    return jax.jit(jnp.sum)(_split(x, mesh))


def psum_wraps_the_reference(x):
    """Door 4: the package's own solution, wrapped."""
    from shard_tutorial import shard_map_psum  # noqa: PLC0415

    return shard_map_psum(x) * 1


def ppermute_zero_times_collective(x):
    """Door 2: the answer computed on one device, plus 0 times a ppermute."""
    x = jnp.asarray(x)
    answer = (jnp.roll(x, 1) + x + jnp.roll(x, -1)) / 3  # one device
    return answer + 0 * ppermute_right(x)


def ppermute_flooded_then_zero_times_collective(x):
    """Door 2: as above, with the one-device answer behind a flood of arrays shaped like it."""
    x = jnp.asarray(x)
    for _ in range(20):  # twenty programs on one device, each with an array of x's shape
        x = x * 1.0
    answer = (jnp.roll(x, 1) + x + jnp.roll(x, -1)) / 3  # one device
    return answer + 0 * ppermute_right(x)


def _auto_mesh(x):
    """A mesh whose axis is Auto (jax.jit partitions what is not in a shard_map)."""
    return Mesh(np.array(jax.devices()[: usable_device_count(len(x))]), ("data",))


def _rolled_average(x):
    return (jnp.roll(x, 1) + x + jnp.roll(x, -1)) / 3  # jit's partitioning: collective-permutes


def ppermute_zero_times_collective_in_one_program(x):
    """Door 2: jit's own answer, plus 0 times a shard_map's ppermutes, in one program."""
    mesh = _auto_mesh(x)
    average = jax.shard_map(_average, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    # XLA keeps the product (0 * inf is NaN, not 0), and with it the shard_map's ppermutes.
    return jax.jit(lambda x: _rolled_average(x) + 0 * average(x))(_split(x, mesh))


def ppermute_zero_times_collective_in_a_later_program(x):
    """Door 2: as above, the product with zero in a program of its own."""
    mesh = _auto_mesh(x)
    average = jax.shard_map(_average, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    blocks = _split(x, mesh)
    answer, unused = jax.jit(_rolled_average)(blocks), jax.jit(average)(blocks)
    return jax.jit(lambda a, b: a + 0 * b)(answer, unused)


def ppermute_gather_everything(x):
    """Door 2: every device gathers the whole array to read two neighbours."""
    mesh = data_mesh(len(x))

    def body(b):
        whole = jax.lax.all_gather(b, "data", tiled=True)
        average = (jnp.roll(whole, 1) + whole + jnp.roll(whole, -1)) / 3
        n = b.shape[0]
        return jax.lax.dynamic_slice_in_dim(average, jax.lax.axis_index("data") * n, n)

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(_split(x, mesh))


def psum_scatter_all_reduce_then_slice(x):
    """Door 2: an all-reduce of every sum, then each device keeps its block."""
    mesh = data_mesh(math.gcd(*x.shape))

    def body(rows):
        sums = jax.lax.psum(rows.sum(0), "data")
        n = sums.shape[0] // jax.lax.axis_size("data")
        return jax.lax.dynamic_slice_in_dim(sums, jax.lax.axis_index("data") * n, n)

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(_split(x, mesh))


def psum_scatter_of_every_row(x):
    """Over budget: each device reduce-scatters its whole block of rows, then sums them."""
    mesh = data_mesh(math.gcd(*x.shape))
    return jax.shard_map(
        lambda b: jax.lax.psum_scatter(b, "data", scatter_dimension=1, tiled=True).sum(0),
        mesh=mesh, in_specs=P("data"), out_specs=P("data"),
    )(_split(x, mesh))  # fmt: skip


def all_to_all_gather_transpose_slice(x):
    """Door 2: gather x whole, transpose, keep this device's rows."""
    mesh = data_mesh(math.gcd(*x.shape))

    def body(rows):
        whole = jax.lax.all_gather(rows, "data", tiled=True)
        n = whole.shape[1] // jax.lax.axis_size("data")
        return jax.lax.dynamic_slice_in_dim(whole.T, jax.lax.axis_index("data") * n, n)

    return jax.shard_map(body, mesh=mesh, in_specs=P("data"), out_specs=P("data"))(_split(x, mesh))


def double_on_one_device(x):
    """Door 3: doubled on one device, then split over the mesh."""
    y = jnp.asarray(x) * 2.0
    mesh = data_mesh(len(x))
    return _split(y, mesh)


def all_gather_then_gathered_to_one_device(x):
    """Door 3: right, then brought onto one device."""
    return jax.device_put(all_gather_right(x), jax.devices()[0])


def dp_identity_shard_map_around_one_device(w, b, x, y, lr):
    """Door 2: the step on one device, then an identity shard_map over the mesh."""
    w, b, x, y = map(jnp.asarray, (w, b, x, y))

    def loss(w, b):
        return jnp.mean((x @ w + b - y) ** 2)

    dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
    new = (w - lr * dw, b - lr * db)
    mesh = data_mesh(x.shape[0])
    return jax.shard_map(lambda a, c: (a, c), mesh=mesh, in_specs=P(), out_specs=P())(*new)


def dp_jit_automatic(w, b, x, y, lr):
    """Door 3: a right step by jit's automatic partitioning (the batch split, no shard_map)."""
    mesh = data_mesh(x.shape[0])

    @jax.jit
    def step(w, b, x, y):
        dw, db = jax.grad(lambda w, b: jnp.mean((x @ w + b - y) ** 2), argnums=(0, 1))(w, b)
        return w - lr * dw, b - lr * db

    return step(_split(w, mesh, P()), _split(b, mesh, P()), _split(x, mesh), _split(y, mesh))


def fsdp_as_data_parallel(w, b, x, y, lr):
    """Door 2: w made whole, a data-parallel step, then split again."""
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    step = jax.shard_map(
        _dp_local, mesh=mesh, in_specs=(P(), P(), P("data"), P("data"), P()),
        out_specs=(P(), P()),
    )  # fmt: skip
    new_w, new_b = step(w, _split(b, mesh, P()), _split(x, mesh), _split(y, mesh), jnp.float32(lr))
    return jax.device_put(new_w, NamedSharding(mesh, P("data", None))), new_b


def _fsdp_gathering_the_batch(w_rows, b, x, y, lr):
    x = jax.lax.all_gather(x, "data", axis=0, tiled=True)  # every device: the whole batch
    y = jax.lax.all_gather(y, "data", axis=0, tiled=True)

    def loss(w_rows, b):  # every device the whole loss: a share of it each, to add up
        w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
        return jnp.mean((x @ w + b - y) ** 2) / jax.lax.axis_size("data")

    dw, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)  # dw: reduce-scattered, as asked
    return w_rows - lr * dw, b - lr * jax.lax.psum(db, "data")


def fsdp_gathering_the_batch(w, b, x, y, lr):
    """Over budget: w split and gathered as asked, but every device holds the whole batch."""
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    step = jax.shard_map(
        _fsdp_gathering_the_batch, mesh=mesh,
        in_specs=(P("data", None), P(), P("data"), P("data"), P()),
        out_specs=(P("data", None), P()), check_vma=False,
    )  # fmt: skip
    args = (_split(w, mesh, P("data", None)), _split(b, mesh, P()), _split(x, mesh),
            _split(y, mesh), jnp.float32(lr))  # fmt: skip
    return step(*args)


def tp_gathered_weights(x, w1, w2):
    """Door 2: the weights gathered whole on every device; no psum."""
    mesh = _tp_mesh(x, w1)

    def body(x, w1, w2):
        w1 = jax.lax.all_gather(w1, "model", axis=1, tiled=True)
        w2 = jax.lax.all_gather(w2, "model", axis=0, tiled=True)
        return jax.nn.relu(x @ w1) @ w2

    return jax.shard_map(
        body, mesh=mesh, in_specs=(P("data", None), P(None, "model"), P("model", None)),
        out_specs=P("data", None), check_vma=False,
    )(_split(x, mesh, P("data", None)), _split(w1, mesh, P(None, "model")),
      _split(w2, mesh, P("model", None)))  # fmt: skip


def tp_one_by_one_mesh(x, w1, w2):
    """Door 3: tensor parallelism on a 1 x 1 mesh."""
    mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
    return jax.shard_map(
        lambda x, w1, w2: jax.lax.psum(jax.nn.relu(x @ w1) @ w2, "model"),
        mesh=mesh, in_specs=(P("data", None), P(None, "model"), P("model", None)),
        out_specs=P("data", None),
    )(x, w1, w2)  # fmt: skip


# (problem, shortcut, status on 8 devices, words of its message, status on 1 device)
SHORTCUTS = [
    ("shard_map_psum", psum_host_unless_traced, "technique", "computed on the host", "technique"),
    ("shard_map_psum", psum_blocks_summed_by_a_callback, "technique", "calls back into Python", "technique"),
    ("shard_map_psum", psum_dead_collective, "placement", "lies on 1 device", "technique"),
    ("shard_map_psum", psum_one_device_mesh, "placement", "lies on 1 device", "pass"),
    ("shard_map_psum", psum_jit_automatic, "technique", "automatic partitioning", "technique"),
    ("shard_map_psum", psum_wraps_the_reference, "reference", "package's own", "reference"),
    ("shard_map_ppermute", ppermute_zero_times_collective, "placement", "computed on 1 device", None),
    ("shard_map_ppermute", ppermute_flooded_then_zero_times_collective, "placement", "computed on 1 device", None),
    ("shard_map_ppermute", ppermute_zero_times_collective_in_one_program, "technique", "never reaches the answer", "technique"),
    ("shard_map_ppermute", ppermute_zero_times_collective_in_a_later_program, "technique", "automatic partitioning", "technique"),
    ("shard_map_ppermute", ppermute_gather_everything, "technique", "all-gather", "pass"),
    ("shard_map_psum_scatter", psum_scatter_all_reduce_then_slice, "technique", "1 all-reduce", "pass"),
    ("shard_map_psum_scatter", psum_scatter_of_every_row, "budget", "sends", "pass"),
    ("shard_map_all_to_all", all_to_all_gather_transpose_slice, "technique", "all-gather", "pass"),
    ("shard_map_double", double_on_one_device, "placement", "computed on 1 device", "technique"),
    ("shard_map_all_gather", all_gather_then_gathered_to_one_device, "placement", "lies on 1 device", "pass"),
    ("data_parallel_sgd_step", dp_identity_shard_map_around_one_device, "placement", "computed on 1 device", None),
    ("data_parallel_sgd_step", dp_jit_automatic, "technique", "automatic partitioning", "technique"),
    ("fsdp_sgd_step", fsdp_as_data_parallel, "technique", "all-gather", "pass"),
    ("fsdp_sgd_step", fsdp_gathering_the_batch, "budget", "gathering the batch", None),
    ("tensor_parallel_mlp", tp_gathered_weights, "technique", "all-reduce", "pass"),
    ("tensor_parallel_mlp", tp_one_by_one_mesh, "placement", "1 device", "pass"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "shortcut", "status", "words", "on_one"),
    SHORTCUTS,
    ids=[f.__name__ for _, f, *_ in SHORTCUTS],
)
def test_each_shortcut_fails_with_the_verdict_that_names_it(
    name, shortcut, status, words, on_one, device_count
):
    problem = PROBLEMS[name]
    # A budget shows on the largest case: with one row per device, say, reduce-scattering
    # every row sends no more than reduce-scattering their sums.
    cases = _cases(problem, count=len(problem.cases))[-1:] if status == "budget" else None
    for case in cases or _cases(problem, count=1):
        got, message = judged(problem, shortcut, case)
        if device_count == 1:
            if on_one is not None:
                assert got == on_one, (case.label, message)
            continue
        assert (got, words in message) == (status, True), (case.label, message)
