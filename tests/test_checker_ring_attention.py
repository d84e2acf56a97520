"""The checker on ring_attention: a reader's right solutions pass; each classic mistake of
its page, written as a reader would, fails with its explanation; the shortcuts get the
verdict each deserves (the reference's file passes, in test_checker.py, as every
problem's does).

Judged in this process (judging.check_here and judged: the checker's worker step and
judge, no subprocess), at the suite's device count, 1 or 8.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from judging import check_here, judged, pasted_reference

from shard_tutorial import PROBLEMS, usable_device_count
from shard_tutorial.checking.worker import load_solution

# Run once per CI, on the newest stack at 8 devices (pyproject.toml's markers): the
# generic tests judge this problem on every stack and device count.
pytestmark = pytest.mark.once

NAME = "ring_attention"
PROBLEM = PROBLEMS[NAME]
SEED = 17
# T=512, D=64: the case whose budget limits what is held
(BIG,) = [case for case in PROBLEM.cases if case.label == "T=512, D=64, causal"]

# A reader's solution: the ring in a Python loop, with the lines a mistake changes as
# placeholders. On one device the ring of one still asks for its hop (to itself).
TEMPLATE = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import axis_mesh


def local(q, k, v, causal, n):
    me = jax.lax.axis_index("seq")
    rows = q.shape[0]
    q = q / math.sqrt(q.shape[1])
    mine = me * rows + jnp.arange(rows)
    top = jnp.full_like(q[:, 0], -jnp.inf)
    total = jnp.zeros_like(q[:, 0])
    out = jnp.zeros_like(q)
    for step in range(n):
        if step > 0 or n == 1:
            {hop}
        s = q @ k.T
        if causal:
            held = {held}
            s = jnp.where(held * rows + jnp.arange(rows)[None, :] <= mine[:, None], s, -jnp.inf)
        new = jnp.maximum(top, s.max(axis=1))
        scale = {scale}
        w = jnp.exp(s - new[:, None])
        total = total * scale + w.sum(axis=1)
        out = out * scale[:, None] + w @ v
        top = new
    return out / total[:, None]


{decorator}
def ring_attention(q, k, v, causal=False):
    mesh = axis_mesh("seq", q.shape[0])
    rows = P("seq", None)
    q, k, v = (jax.device_put(a, NamedSharding(mesh, rows)) for a in (q, k, v))
    return jax.shard_map(
        lambda q, k, v: local(q, k, v, causal, mesh.shape["seq"]),
        mesh=mesh, in_specs=(rows, rows, rows), out_specs=rows,
    )(q, k, v)
"""

HOP = 'k, v = jax.lax.ppermute((k, v), "seq", [(i, (i + 1) % n) for i in range(n)])'
RIGHT = {"hop": HOP, "held": "(me - step) % n", "scale": "jnp.exp(top - new)", "decorator": ""}
JITTED = {**RIGHT, "decorator": '@jax.jit(static_argnames="causal")'}
# The mistakes are in the values, not in how the code runs: jitted, each case is one
# program to compile (eager, shard_map runs each operation of each hop as its own).
NO_RESCALE = {**JITTED, "scale": "jnp.ones_like(new)"}
OWN_BLOCK = {**JITTED, "held": "me"}
OTHER_WAY = {**JITTED, "held": "(me + step) % n"}


def _write(tmp_path, **parts):
    path = tmp_path / f"{NAME}.py"
    path.write_text(TEMPLATE.format(**parts))
    return path


def _check(tmp_path, parts, *, few=True, lean=False):
    report = check_here(NAME, _write(tmp_path, **parts), seed=SEED, few=few, lean=lean)
    return report, " ".join(str(report).split())  # the report wraps its lines


def _load(tmp_path, parts):
    path = _write(tmp_path, **parts)
    return load_solution({"kind": "file", "path": str(path), "function": NAME})


def test_a_readers_jitted_solution_passes(tmp_path):
    # A right answer's cases (judging.py), the big one with a budget of bytes held among them.
    report, text = _check(tmp_path, JITTED, lean=True)
    assert report.passed, text
    if jax.device_count() > 1:
        assert BIG.label in text


def test_forgetting_to_rescale_fails_with_its_explanation(tmp_path, device_count):
    report, text = _check(tmp_path, NO_RESCALE)
    (run,) = report.runs
    if device_count == 1:
        assert run.passed, text  # one block: the maximum never changes
        return
    assert not run.passed
    assert "This is the ring on 8 devices without rescaling" in text
    assert "exp(old maximum - new maximum)" in text


def test_masking_every_block_as_the_devices_own_fails_with_its_explanation(tmp_path, device_count):
    report, text = _check(tmp_path, OWN_BLOCK)
    (run,) = report.runs
    if device_count == 1:
        assert run.passed, text
        return
    by_label = {r.label: r for r in run.results}
    assert by_label["T=8, D=4: one row per device on 8"].status == "pass"  # not causal
    wrong = by_label["T=16, D=4, causal, large scores"]
    assert wrong.status == "fail", text
    assert "every block of keys was masked as if it were the device's own" in wrong.message


def test_the_mask_from_the_wrong_direction_fails_with_its_explanation(tmp_path, device_count):
    report, text = _check(tmp_path, OTHER_WAY)
    (run,) = report.runs
    if device_count == 1:
        assert run.passed, text
        return
    by_label = {r.label: r for r in run.results}
    assert by_label["the example, causal"].status == "pass"  # 2 devices: both ways are one
    wrong = by_label["T=12, D=3, causal: 6 of 8 devices"]
    assert wrong.status == "fail", text
    assert "the causal mask took the block from the wrong direction" in wrong.message
    assert "not (i + s) mod n" in wrong.message


# --- shortcuts --------------------------------------------------------------------------


def _attend(q, k, v, causal):
    """Plain attention on whatever devices hold q, k and v (not the package's code)."""
    scores = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        scores = jnp.where(jnp.tril(jnp.ones(scores.shape, bool)), scores, -jnp.inf)
    return jax.nn.softmax(scores, axis=1) @ v


def gathered(q, k, v, causal=False):
    """Gather k and v whole inside shard_map, then attend."""
    from jax.sharding import NamedSharding  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    from shard_tutorial import axis_mesh  # noqa: PLC0415

    mesh = axis_mesh("seq", q.shape[0])
    rows = P("seq", None)

    def local(q, k, v):
        k = jax.lax.all_gather(k, "seq", tiled=True)
        v = jax.lax.all_gather(v, "seq", tiled=True)
        scores = q @ k.T / np.sqrt(q.shape[1])
        if causal:
            mine = jax.lax.axis_index("seq") * q.shape[0] + jnp.arange(q.shape[0])
            keys = jnp.arange(k.shape[0])
            scores = jnp.where(keys[None, :] <= mine[:, None], scores, -jnp.inf)
        return jax.nn.softmax(scores, axis=1) @ v

    q, k, v = (jax.device_put(a, NamedSharding(mesh, rows)) for a in (q, k, v))
    return jax.shard_map(local, mesh=mesh, in_specs=(rows,) * 3, out_specs=rows)(q, k, v)


def collected(q, k, v, causal=False):
    """Every block fetched round the ring, joined whole, then attended to."""
    from jax.sharding import NamedSharding  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    from shard_tutorial import axis_mesh  # noqa: PLC0415

    mesh = axis_mesh("seq", q.shape[0])
    n, rows = mesh.shape["seq"], P("seq", None)

    def local(q, k, v):
        me = jax.lax.axis_index("seq")
        r = q.shape[0]
        keys, values, positions = [k], [v], [me * r + jnp.arange(r)]
        for step in range(1, n):
            k, v = jax.lax.ppermute((k, v), "seq", [(i, (i + 1) % n) for i in range(n)])
            keys.append(k)
            values.append(v)
            positions.append(((me - step) % n) * r + jnp.arange(r))
        scores = q @ jnp.concatenate(keys).T / np.sqrt(q.shape[1])
        if causal:
            mine = me * r + jnp.arange(r)
            scores = jnp.where(
                jnp.concatenate(positions)[None, :] <= mine[:, None], scores, -jnp.inf
            )
        return jax.nn.softmax(scores, axis=1) @ jnp.concatenate(values)

    q, k, v = (jax.device_put(a, NamedSharding(mesh, rows)) for a in (q, k, v))
    return jax.shard_map(local, mesh=mesh, in_specs=(rows,) * 3, out_specs=rows)(q, k, v)


def automatic(q, k, v, causal=False):
    """jax.jit's automatic partitioning of the plain attention, rows over "seq" (Auto axes)."""
    from jax.sharding import AxisType, NamedSharding  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    n = usable_device_count(q.shape[0])
    mesh = jax.make_mesh((n,), ("seq",), axis_types=(AxisType.Auto,), devices=jax.devices()[:n])
    rows = NamedSharding(mesh, P("seq", None))
    q, k, v = (jax.device_put(a, rows) for a in (q, k, v))
    return jax.jit(_attend, static_argnums=3)(q, k, v, causal)


def one_device(q, k, v, causal=False):
    """The ring, on a mesh of one device."""
    from jax.sharding import Mesh  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    mesh = Mesh(np.array(jax.devices()[:1]), ("seq",))
    rows = P("seq", None)

    def local(q, k, v):
        k, v = jax.lax.ppermute((k, v), "seq", [(0, 0)])
        return _attend(q, k, v, causal)

    return jax.shard_map(local, mesh=mesh, in_specs=(rows,) * 3, out_specs=rows)(q, k, v)


def dead_ring(q, k, v, causal=False):
    """The package's ring run and thrown away; the answer computed on one device."""
    # Jitted, as each mistake here: eager, the ring compiles each operation of each hop.
    jax.jit(collected, static_argnames="causal")(q, k, v, causal)
    return jnp.asarray(_attend(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), causal))


SHORTCUTS = [
    (gathered, "technique", "all-gather", "pass"),
    (automatic, "technique", "automatic partitioning", "technique"),
    (one_device, "placement", "1 device", "pass"),
    (dead_ring, "placement", "lies on 1 device", "technique"),
]


@pytest.mark.parametrize(
    ("shortcut", "status", "words", "on_one"), SHORTCUTS, ids=[s[0].__name__ for s in SHORTCUTS]
)
def test_each_shortcut_fails_with_the_verdict_that_names_it(
    shortcut, status, words, on_one, device_count
):
    case = PROBLEM.cases[4]  # T=16, causal: 8 devices on 8
    got, message = judged(PROBLEM, shortcut, case)
    if device_count == 1:
        assert got == on_one, message
        return
    assert (got, words in message) == (status, True), message


def test_collecting_every_block_then_attending_is_over_the_held_budget(device_count):
    collect = jax.jit(collected, static_argnames="causal")
    small, big = judged(PROBLEM, collect, PROBLEM.cases[4]), judged(PROBLEM, collect, BIG)
    if device_count == 1:
        assert small[0] == big[0] == "pass"  # a ring of one: no hop, shard_map alone asked
        return
    assert small[0] == "pass"  # k and v of 512 bytes: no limit on what is held
    status, message = big
    assert status == "budget", message
    assert "its arguments, outputs and temporaries" in message
    assert "where this problem allows 360,447" in message


def test_the_reference_wrapped_is_the_packages_own(tmp_path):
    path = tmp_path / f"{NAME}.py"
    path.write_text(
        "from shard_tutorial import ring_attention as _reference\n\n\n"
        "def ring_attention(q, k, v, causal=False):\n"
        "    return _reference(q, k, v, causal)\n"
    )
    solution = load_solution({"kind": "file", "path": str(path), "function": NAME})
    status, message = judged(PROBLEM, solution, PROBLEM.cases[4])
    assert status == "reference", message


def test_the_pasted_reference_passes_on_the_big_case(tmp_path):
    path = tmp_path / f"{NAME}.py"
    path.write_text(pasted_reference(NAME))
    solution = load_solution({"kind": "file", "path": str(path), "function": NAME})
    assert judged(PROBLEM, solution, BIG)[0] == "pass"


def test_the_files_define_the_problems_function():
    for parts in (RIGHT, JITTED, NO_RESCALE, OWN_BLOCK, OTHER_WAY):
        source = TEMPLATE.format(**parts)
        compile(source, NAME, "exec")
        assert f"def {NAME}(q, k, v, causal=False):" in source
