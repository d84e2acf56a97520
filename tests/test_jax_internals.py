"""Every private attribute of JAX the checker patches or reads exists on the installed JAX.

The recorder replaces functions inside ``jax._src`` (shard_tutorial.checking.jax_internals
says which, and why no public API would do). A JAX release that renames or removes one
must fail here, by name, not in a check whose recording quietly sees nothing.
"""

from __future__ import annotations

import importlib

import jax
import pytest

from shard_tutorial.checking import jax_internals
from shard_tutorial.checking.jax_internals import INTERNALS, PATCHED
from shard_tutorial.checking.recording import _Hooks, record


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda internal: internal.path)
def test_each_internal_exists_on_this_jax(internal):
    importlib.import_module(internal.module)
    missing = object()
    assert internal.get(missing) is not missing, (
        f"jax {jax.__version__} has no {internal.path}: {internal.why}"
    )
    if internal.patched:
        assert callable(internal.get())


def test_the_table_names_every_internal_once():
    assert len({internal.path for internal in INTERNALS}) == len(INTERNALS)
    listed = {
        value
        for name, value in vars(jax_internals).items()
        if isinstance(value, jax_internals.Internal) and name.isupper()
    }
    assert listed == set(INTERNALS)
    assert all(internal.why for internal in INTERNALS)


def test_the_recorder_replaces_exactly_the_patched_ones():
    hooks = _Hooks.install()
    assert set(hooks.replacements) == set(PATCHED)
    for internal, replacement in hooks.replacements.items():
        assert internal.get() is replacement, internal.path
    assert hooks.intact()


def test_a_recording_sees_a_program_through_the_patched_internals():
    @jax.jit
    def double(x):
        return 2 * x

    x = jax.numpy.arange(4.0)
    double(x)  # compiled, and on the C++ fast path, before the recording
    with record() as recording:
        double(x)
    assert len(recording.runs) == 1
