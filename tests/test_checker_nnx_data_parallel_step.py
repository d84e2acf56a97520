"""The checker on nnx_data_parallel_step: each classic mistake of its page, written as a
reader's file in Flax NNX, fails with its explanation (the reference's file passes, in
test_checker.py, as every problem's does).

The two gradient mistakes are right on one device, where the block is the whole batch:
only the run on 8 devices shows them. Returning the model instead of its arrays fails
on both.
"""

from __future__ import annotations

import textwrap

import pytest
from judging import check_here

# Judged in this process (judging.check_here: the checker's worker step and judge, no
# subprocess), at the suite's device count, 1 or 8; the checker's isolation of a
# reader's code is tested in test_checker.py and test_checker_careless.py.

NAME = "nnx_data_parallel_step"
SEED = 13  # the checker adds fresh random cases; a fixed seed keeps them the same

HEADER = """\
import functools

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from shard_tutorial import data_mesh


def nnx_data_parallel_step(seed, x, y, lr):
    model = nnx.Linear(x.shape[-1], y.shape[-1], rngs=nnx.Rngs(int(seed)))
    mesh = data_mesh(x.shape[0])
    model = jax.device_put(model, NamedSharding(mesh, P()))
    x, y = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    model = step(mesh)(model, x, y, lr)
    return RESULT


@functools.cache
def step(mesh):
    return jax.jit(jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(P(), P("data"), P("data"), P()),
        out_specs=P(),
    ))

"""

RIGHT_LOSS = """
def local_step(model, x, y, lr):
    optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
    loss = lambda model: jax.lax.pmean(jnp.mean((model(x) - y) ** 2), "data")
    optimizer.update(model, nnx.grad(loss)(model))
    return model
"""

ARRAYS = "model.kernel[...], model.bias[...]"

# (the body of local_step, what the solution returns, whether 1 device passes, the words)
MISTAKES = {
    "a local-mean loss with no collective (8x)": (
        """
        def local_step(model, x, y, lr):
            optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
            loss = lambda model: jnp.mean((model(x) - y) ** 2)  # this block's mean only
            optimizer.update(model, nnx.grad(loss)(model))
            return model
        """,
        ARRAYS,
        True,
        (
            "The step is 8 times the right one, as on 8 devices when the gradient is summed "
            "over them once more than it should be"
        ),
    ),
    "the pmap recipe: a psum of the gradients (64x)": (
        """
        def local_step(model, x, y, lr):
            optimizer = nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)
            loss = lambda model: jnp.mean((model(x) - y) ** 2)
            grads = jax.lax.psum(nnx.grad(loss)(model), "data")
            optimizer.update(model, grads)
            return model
        """,
        ARRAYS,
        True,
        "The step is 64 times the right one, 8 x 8 on 8 devices",
    ),
    "the model returned instead of its arrays": (
        RIGHT_LOSS,
        "model",
        False,
        "returned a Linear, not the tuple (kernel, bias)",
    ),
    "the nnx.Param variables returned instead of their arrays": (
        RIGHT_LOSS,
        "model.kernel, model.bias",
        False,
        "kernel: returned a Param, not an array",
    ),
}


def test_the_right_step_written_as_the_mistakes_are_passes(tmp_path):
    # Guards the mistakes below: only the lines they change make them fail.
    path = tmp_path / f"{NAME}.py"
    path.write_text(HEADER.replace("RESULT", ARRAYS) + RIGHT_LOSS)
    report = check_here(NAME, path, seed=SEED, lean=True)  # a right answer's cases
    assert report.passed, str(report)


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_classic_mistake_fails_with_its_explanation(mistake, tmp_path, device_count):
    body, result, one_passes, words = MISTAKES[mistake]
    path = tmp_path / f"{NAME}.py"
    path.write_text(HEADER.replace("RESULT", result) + textwrap.dedent(body))
    report = check_here(NAME, path, seed=SEED)
    text = " ".join(str(report).split())  # the report wraps lines
    (run,) = report.runs
    if device_count == 1:
        assert run.passed is one_passes, text  # one device: the block is the whole batch
        if one_passes:
            return
    assert not run.passed
    assert words in text, text
