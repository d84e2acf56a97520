"""A digest of an array's values, by which the judge knows a candidate it was not sent.

The worker sends the values of the first few arrays a call made (its candidates, see
:func:`shard_tutorial.checking.worker.describe_lineage`), and past those only each one's
:func:`fingerprint`; the judge compares the answer's fingerprint with them
(:mod:`shard_tutorial.checking.judge`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from shard_tutorial.problem import precise

__all__ = ["fingerprint"]


def fingerprint(array: Any) -> str:
    """A digest of an array's shape and values as numbers: the same for the same values.

    The values are compared as :func:`precise` widens them (a float32 array and a
    bfloat16 one with the same numbers match), with ``-0.0`` taken as ``0.0``:
    ``y + 0 * z`` has the values of ``y``, and this digest.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.checking.digest import fingerprint
      >>> a = np.array([1.5, -0.0], np.float32)
      >>> fingerprint(a) == fingerprint(np.array([1.5, 0.0])), fingerprint(a) == fingerprint(a[:1])
      (True, False)
    """
    values = np.ascontiguousarray(precise(np.asarray(array)) + 0)  # -0.0 + 0 is 0.0
    digest = hashlib.sha256(repr(values.shape).encode())
    digest.update(values.tobytes())
    return digest.hexdigest()
