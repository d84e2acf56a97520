"""The parameters a Flax ``nnx.Linear`` starts with, built once per shape and seed.

The oracles of the problems with an ``nnx.Linear`` model (a forward pass, an SGD
step) start from the model's initial parameters. Building the model runs JAX's
random number generator op by op, 5 ms a model; a check asks for the same few
models dozens of times (every case on 1 and on 8 devices, their tolerances and
explanations), so they are built once and kept, read-only.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from flax import nnx

__all__ = ["linear_start"]


def linear_start(seed: int, d_in: int, d_out: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(kernel, bias)`` of ``nnx.Linear(d_in, d_out, rngs=nnx.Rngs(seed))``, as NumPy.

    Args:
      seed: the seed of the model's ``nnx.Rngs``.
      d_in: the number of input features.
      d_out: the number of output features.

    Returns:
      The kernel, (d_in, d_out), and the bias, (d_out,), in the parameters' dtype
      (float32; float64 in JAX's 64-bit mode). Both are read-only: one copy serves
      every caller.

    Examples:
      >>> from flax import nnx
      >>> kernel, bias = linear_start(0, 3, 2)
      >>> kernel.shape, bias.shape, kernel.dtype, kernel.flags.writeable
      ((3, 2), (2,), dtype('float32'), False)
      >>> model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
      >>> bool((kernel == model.kernel[...]).all())
      True
    """
    # The 64-bit mode changes the parameters' dtype: part of what the model is.
    return _built(int(seed), int(d_in), int(d_out), bool(jax.config.jax_enable_x64))


@functools.lru_cache(maxsize=256)
def _built(seed: int, d_in: int, d_out: int, x64: bool) -> tuple[np.ndarray, np.ndarray]:
    del x64  # a key of the cache only
    with jax.ensure_compile_time_eval():  # concrete, even when first asked for inside a trace
        model = nnx.Linear(d_in, d_out, rngs=nnx.Rngs(seed))
    assert model.bias is not None  # nnx.Linear has a bias unless built with use_bias=False
    kernel, bias = np.array(model.kernel[...]), np.array(model.bias[...])
    kernel.flags.writeable = bias.flags.writeable = False
    return kernel, bias
