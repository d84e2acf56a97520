"""The checker on data_parallel_sgd_step: each classic mistake of its page, written as a
reader's file, fails on 8 devices with its explanation (the reference's file passes, in
test_checker.py, as every problem's does).

Each mistake is right on one device, where the block is the whole batch: the checker's
run on 1 device passes it, and only the run on 8 shows what is wrong.
"""

from __future__ import annotations

import textwrap

import pytest
from judging import check_here

# Judged in this process (judging.check_here: the checker's worker step and judge, no
# subprocess), at the suite's device count, 1 or 8; the checker's isolation of a
# reader's code is tested in test_checker.py and test_checker_careless.py.

NAME = "data_parallel_sgd_step"
SEED = 13  # the checker adds fresh random cases; a fixed seed keeps them the same

HEADER = """\
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def data_parallel_sgd_step(w, b, x, y, lr):
    mesh = data_mesh(x.shape[0])
    w, b = jax.device_put((w, b), NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    step = jax.jit(jax.shard_map(
        lambda w, b, x, y: local_step(w, b, x, y, lr),
        mesh=mesh,
        in_specs=(P(), P(), P("data"), P("data")),
        out_specs=(P(), P()),
        check_vma=CHECK_VMA,
    ))
    return step(w, b, x, y)

"""

# (the body of local_step, check_vma, the words the report must contain)
MISTAKES = {
    "a local-mean loss with no collective (8x)": (
        """
        def local_step(w, b, x, y, lr):
            loss = lambda w, b: jnp.mean((x @ w + b - y) ** 2)  # this block's mean only
            dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
            return w - lr * dw, b - lr * db
        """,
        True,
        (
            "The step is 8 times the right one, as on 8 devices when the gradient is summed "
            "over them once more than it should be"
        ),
    ),
    "a pmean of gradients JAX already summed (8x)": (
        """
        def local_step(w, b, x, y, lr):
            loss = lambda w, b: jnp.mean((x @ w + b - y) ** 2)
            grads = jax.grad(loss, argnums=(0, 1))(w, b)
            dw, db = jax.lax.pmean(grads, "data")  # the pmap-era recipe
            return w - lr * dw, b - lr * db
        """,
        True,
        "a pmean of them changes nothing",
    ),
    "a psum of gradients JAX already summed (64x)": (
        """
        def local_step(w, b, x, y, lr):
            loss = lambda w, b: jnp.mean((x @ w + b - y) ** 2)
            grads = jax.grad(loss, argnums=(0, 1))(w, b)
            dw, db = jax.lax.psum(grads, "data")
            return w - lr * dw, b - lr * db
        """,
        True,
        "The step is 64 times the right one, 8 x 8 on 8 devices",
    ),
    "check_vma=False: each device its own parameters": (
        """
        def local_step(w, b, x, y, lr):
            loss = lambda w, b: jax.lax.pmean(jnp.mean((x @ w + b - y) ** 2), "data")
            dw, db = jax.grad(loss, argnums=(0, 1))(w, b)
            return w - lr * dw, b - lr * db
        """,
        False,
        (
            "the devices hold different values for w and b, which the output's sharding says "
            "every device holds a copy of"
        ),
    ),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_classic_mistake_fails_on_8_devices_with_its_explanation(
    mistake, tmp_path, device_count
):
    body, check_vma, words = MISTAKES[mistake]
    path = tmp_path / f"{NAME}.py"
    path.write_text(HEADER.replace("CHECK_VMA", str(check_vma)) + textwrap.dedent(body))
    report = check_here(NAME, path, seed=SEED)
    text = " ".join(str(report).split())  # the report wraps lines
    (run,) = report.runs
    if device_count == 1:
        assert run.passed, text  # one device: the block is the whole batch, nothing to sum
        return
    assert not run.passed
    assert words in text, text
