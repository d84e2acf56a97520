"""The checker on fsdp_sgd_step: the right step written as a reader would passes; each
classic mistake of its page, written as a reader would, fails with its explanation (the
reference's file passes, in test_checker.py, as every problem's does).

Each check runs the solution in fresh processes on 1 and 8 fake devices, whatever device
count this test process has: one check per mistake, with a fixed seed.
"""

from __future__ import annotations

import pytest
from judging import check_here

# Judged in this process (judging.check_here: the checker's worker step and judge, no
# subprocess), at the suite's device count, 1 or 8; the checker's isolation of a
# reader's code is tested in test_checker.py and test_checker_careless.py.

NAME = "fsdp_sgd_step"
SEED = 13

HEADER = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def laid_out(w, b, x, y, w_spec):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
    return mesh, put(w, w_spec), put(b, P()), put(x, P("data")), put(y, P("data"))


def mean_loss(w, b, x, y):
    return jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")

"""

# The FSDP step as a reader writes it, with {gradients} the line that takes them.
FSDP_STEP = """
def fsdp_sgd_step(w, b, x, y, lr):
    mesh, w, b, x, y = laid_out(w, b, x, y, P("data", None))

    def step(w_rows, b, x, y):
        def loss(w_rows, b):
            w = jax.lax.all_gather(w_rows, "data", axis=0, tiled=True)
            return {loss}

        dw, db = jax.grad(loss, argnums=(0, 1))(w_rows, b)
        {gradients}
        return w_rows - lr * dw, b - lr * db

    specs = (P("data", None), P(), P("data"), P("data"))
    return jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=specs[:2])(w, b, x, y)
"""

# The same step under jax.jit: one program a case to compile, where eager shard_map runs
# each operation as its own. The mistakes below are in the values, not in how code runs.
JITTED_STEP = FSDP_STEP.replace(
    "return jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=specs[:2])(w, b, x, y)",
    "return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=specs[:2]))(\n"
    "        w, b, x, y\n    )",
)
assert JITTED_STEP != FSDP_STEP

# Right values, but every device keeps (and returns) the whole w: data parallelism.
REPLICATED_W = """
def fsdp_sgd_step(w, b, x, y, lr):
    mesh, w, b, x, y = laid_out(w, b, x, y, P())

    def step(w, b, x, y):
        dw, db = jax.grad(mean_loss, argnums=(0, 1))(w, b, x, y)
        return w - lr * dw, b - lr * db

    specs = (P(), P(), P("data"), P("data"))
    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=specs[:2]))(
        w, b, x, y
    )
"""

# (solution, words its explanation must contain on 8 devices)
MISTAKES = {
    "a psum of the gradients (the pmap-era recipe)": (
        JITTED_STEP.format(
            loss="mean_loss(w, b, x, y)",
            gradients='dw, db = jax.lax.psum(dw, "data"), jax.lax.psum(db, "data")',
        ),
        (
            "Each device's block of w moved by the gradients of all 8 blocks of rows added up, "
            "and b by 8 times its step: a psum of the gradients jax.grad returned"
        ),
    ),
    "each device's own mean loss": (
        JITTED_STEP.format(loss="jnp.mean((x @ w + b - y) ** 2)", gradients="pass"),
        (
            "The step is 8 times the right one, as on 8 devices when the gradient is summed "
            "over them once more than it should be. JAX already sums the gradients over the "
            "devices: w's by the reduce-scatter that is the transpose of its all_gather"
        ),
    ),
}


def _run(tmp_path, source: str, *, lean: bool = False):
    path = tmp_path / f"{NAME}.py"
    path.write_text(source)
    return check_here(NAME, path, seed=SEED, lean=lean)


def test_the_right_step_written_as_a_reader_would_passes(tmp_path):
    report = _run(
        tmp_path,
        HEADER + FSDP_STEP.format(loss="mean_loss(w, b, x, y)", gradients="pass"),
        lean=True,  # the cases of a right answer of the corpus (tests/judging.py)
    )
    assert report.passed, str(report)


def test_w_kept_whole_on_every_device_is_data_parallelism_not_fsdp(tmp_path, device_count):
    report = _run(tmp_path, HEADER + REPLICATED_W)
    (run,) = report.runs
    text = " ".join(str(report).split())
    if device_count == 1:  # one device: nothing to gather or scatter, shard_map alone asked
        assert run.passed, text
        return
    # Right values, but w is never gathered (nor its gradient reduce-scattered): the step
    # is data parallelism's, on every case whose mesh has several devices and whose lr is
    # not 0 (with lr=0 the gradient cannot reach the answer).
    shown = [r for r in run.results if "lr=0" not in r.label and r.status != "pass"]
    assert {r.status for r in shown} == {"technique"}, text
    # With lr=0 the technique cannot show, but the layout still can: w is whole everywhere.
    (still,) = [r for r in run.results if "lr=0" in r.label]
    assert still.status == "placement", text
    assert "right values, but no all-gather (all_gather) from the code inside" in text
    assert "1 all-reduce of" in text  # what it runs instead: data parallelism's


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_classic_mistake_fails_on_8_devices_with_its_explanation(
    mistake, tmp_path, device_count
):
    body, words = MISTAKES[mistake]
    report = _run(tmp_path, HEADER + body)
    (run,) = report.runs
    if device_count == 1:
        assert run.passed, str(report)  # on one device there is nothing to sum twice
        return
    assert not run.passed
    assert words in " ".join(str(report).split()), str(report)  # the report wraps lines
