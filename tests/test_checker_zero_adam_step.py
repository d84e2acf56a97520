"""The checker on zero_adam_step: the right step written as a reader would passes; the
classic mistakes of its page, written as a reader would, fail with their explanations
on 8 devices and pass on 1, where there is nothing to sum twice nor to gather (the
reference's file passes, in test_checker.py, as every problem's does).

Judged in this process (judging.check_here), at the suite's device count, 1 or 8.
"""

from __future__ import annotations

import pytest
from judging import check_here

NAME = "zero_adam_step"

HEADER = """\
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def mean_loss(w, x, y):
    return jax.lax.pmean(jnp.mean((x @ w - y) ** 2), "data")

"""

# The ZeRO step as a reader writes it, with {gradient} the line that takes the gradient
# of this device's rows and {update} the line that computes Adam's step of them.
ZERO_STEP = """
def zero_adam_step(w, m, v, x, y, step, lr):
    mesh = data_mesh(math.gcd(x.shape[0], w.shape[0]))
    w = jax.device_put(w, NamedSharding(mesh, P()))
    m, v, x, y = jax.device_put((m, v, x, y), NamedSharding(mesh, P("data", None)))

    def local(w, m, v, x, y):
        {gradient}
        k = m.shape[0]
        w_rows = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index("data") * k, k)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g**2
        {update}
        new_w = jax.lax.all_gather(w_rows - lr * update, "data", axis=0, tiled=True, to="invarying")
        return new_w, m, v

    rows = P("data", None)
    return jax.jit(
        jax.shard_map(
            local, mesh=mesh, in_specs=(P(), rows, rows, rows, rows), out_specs=(P(), rows, rows)
        )
    )(w, m, v, x, y)
"""

OWN_PART = (
    "g = jax.lax.psum_scatter(jax.grad(mean_loss)(jax.lax.pcast(w, 'data', to='varying'), x, y), "
    "'data', scatter_dimension=0, tiled=True)"
)
CORRECTED = "update = (m / (1 - 0.9**step)) / (jnp.sqrt(v / (1 - 0.999**step)) + 1e-8)"

# (solution, its verdict on 8 devices, words its explanation must contain there)
MISTAKES = {
    "a psum_scatter of the gradient of the replicated w": (
        ZERO_STEP.format(gradient=OWN_PART.replace("jax.lax.pcast(w, 'data', to='varying')", "w"),
                         update=CORRECTED),
        "fail",
        ("m and v are those of a gradient 8 times too large, as on 8 devices when it is "
        "summed over them once more than it should be"),
    ),
    "the gradient all-reduced whole, then sliced": (
        ZERO_STEP.format(
            gradient="g = jax.lax.dynamic_slice_in_dim(jax.grad(mean_loss)(w, x, y), "
            "jax.lax.axis_index('data') * m.shape[0], m.shape[0])",
            update=CORRECTED,
        ),
        "technique",
        "right values, but no reduce-scatter (psum_scatter) from the code inside jax.shard_map",
    ),
    "Adam without its bias correction": (
        ZERO_STEP.format(gradient=OWN_PART, update="update = m / (jnp.sqrt(v) + 1e-8)"),
        "fail",
        ("m and v are right, but w moved by lr * m / (sqrt(v) + eps), without Adam's bias "
        "correction"),
    ),
}  # fmt: skip


def _run(tmp_path, source: str):
    path = tmp_path / f"{NAME}.py"
    path.write_text(HEADER + source)
    return check_here(NAME, path, lean=True)


def test_the_right_step_written_as_a_reader_would_passes(tmp_path):
    report = _run(tmp_path, ZERO_STEP.format(gradient=OWN_PART, update=CORRECTED))
    assert report.passed, str(report)


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_classic_mistake_gets_its_verdict_on_8_devices(mistake, tmp_path, device_count):
    body, verdict, words = MISTAKES[mistake]
    report = _run(tmp_path, body)
    (run,) = report.runs
    text = " ".join(str(report).split())  # the report wraps lines
    if device_count == 1 and "bias" not in mistake:
        assert run.passed, text  # one device: nothing summed twice, nothing to scatter
        return
    assert {r.status for r in run.results} >= {verdict}, text
    assert words in text, text
