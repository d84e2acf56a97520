"""The checker: run a reader's solution in processes of its own, and judge what it returned.

The package's modules, in the order a check uses them:

- :mod:`~shard_tutorial.checking.checker`: :func:`check`, which starts the workers, follows
  them (time, memory, output, hangs) and collects the report;
- :mod:`~shard_tutorial.checking.zygote`: a process that has imported JAX already, from
  which workers are forked;
- :mod:`~shard_tutorial.checking.worker`: the process that runs the solution and sends
  back plain data, never a verdict;
- :mod:`~shard_tutorial.checking.protocol`: that data, as typed records (the output, how
  it was made, or the error raised), and its one encoding on the pipe and one decoding;
- :mod:`~shard_tutorial.checking.recording` and :mod:`~shard_tutorial.checking.dataflow`:
  what one call ran (its XLA programs, its copies from the host) and what its outputs
  depend on;
- :mod:`~shard_tutorial.checking.assembly`: a cluster's answers put together;
- :mod:`~shard_tutorial.checking.judge`: the verdicts, given in the checker's own process;
- :mod:`~shard_tutorial.checking.report`: the verdicts as a report, as text or HTML.

Each name below is imported from its module on first use, as in :mod:`shard_tutorial`:
importing :mod:`shard_tutorial.checking.recording` (as the worker and the pages do) must
not import :mod:`~shard_tutorial.checking.checker`, which starts a zygote when imported.

Examples:
  >>> import shard_tutorial.checking
  >>> shard_tutorial.checking.check is shard_tutorial.check
  True
  >>> shard_tutorial.checking.CheckReport.__module__
  'shard_tutorial.checking.report'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "CaseResult": "shard_tutorial.checking.report",
    "CheckReport": "shard_tutorial.checking.report",
    "DEFAULT_DEADLINE": "shard_tutorial.checking.checker",
    "DEFAULT_DEVICES": "shard_tutorial.checking.checker",
    "DEFAULT_TIMEOUT": "shard_tutorial.checking.checker",
    "DeviceRun": "shard_tutorial.checking.report",
    "MEMORY_LIMIT": "shard_tutorial.checking.checker",
    "check": "shard_tutorial.checking.checker",
    "reference_copy": "shard_tutorial.checking.checker",
}

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_DEVICES",
    "DEFAULT_TIMEOUT",
    "MEMORY_LIMIT",
    "CaseResult",
    "CheckReport",
    "DeviceRun",
    "check",
    "reference_copy",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        msg = f"module 'shard_tutorial.checking' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # what type checkers and linters read; at run time, __getattr__
    from shard_tutorial.checking.checker import (
        DEFAULT_DEADLINE,
        DEFAULT_DEVICES,
        DEFAULT_TIMEOUT,
        MEMORY_LIMIT,
        check,
        reference_copy,
    )
    from shard_tutorial.checking.report import CaseResult, CheckReport, DeviceRun
