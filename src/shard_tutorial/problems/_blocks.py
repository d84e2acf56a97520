"""Helpers for recognising per-device mistakes: what an answer computed block by block looks like.

The classic mistakes of the collective problems share a shape: each device does
the right thing to its own block and nothing else. These helpers rebuild such an
answer in NumPy for every device count a solution may have used, so a problem's
``explain`` can say "that is each block on its own, on d devices".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["blockwise"]


def blockwise(
    x: np.ndarray, devices: int, function: Callable[[np.ndarray], np.ndarray], axis: int = 0
) -> np.ndarray:
    """``function`` applied to each of ``devices`` equal blocks of ``x``, the results joined.

    Args:
      x: the array to cut.
      devices: how many equal blocks to cut ``axis`` into.
      function: what each device computes from its block.
      axis: the axis to cut along and to join the results along.

    Returns:
      The blocks' results concatenated along ``axis``: what ``out_specs`` on that
      axis puts together.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problems._blocks import blockwise
      >>> blockwise(np.arange(6), 2, np.cumsum)
      array([ 0,  1,  3,  3,  7, 12])
    """
    return np.concatenate([function(b) for b in np.split(x, devices, axis=axis)], axis=axis)
