"""The private parts of JAX the checker patches or reads, in one table.

The recorder (:func:`shard_tutorial.checking.recording.record`) must see every XLA
program one call runs, with the arrays that went in and came out, and every copy of
host data to the devices: that is how the judge knows how an answer was computed.
JAX has no public API for that:

- ``jax.monitoring`` reports events and durations (a compilation, a cache hit), not
  the programs that ran or the arrays they made;
- ``jax_log_compiles`` and ``jax.stages`` (``lower``, ``compile``) show what is
  compiled, once; a program compiled earlier runs again unseen, as does every
  eager operation after its first;
- ``jax.debug.callback`` and the profiler see inside a program only if the code
  being judged asks for them, and give no arrays;
- ``jax.make_jaxpr`` traces without running: it cannot say which program made the
  values that came back.

So the recorder replaces, for the life of the process, the Python function through
which JAX runs every ``jit`` program once its C++ fast path is off, the one that
keeps it off, and the ones every copy to the devices goes through (:data:`PATCHED`),
and reads a few more (:data:`INTERNALS`). Each is a module attribute that JAX looks
up at every call, in jax 0.10 and 0.12 alike. ``tests/test_jax_internals.py`` checks
that each exists on the installed JAX, so an upgrade that renames one fails there,
loudly, rather than in a check that sees nothing.

Examples:
  >>> from shard_tutorial.checking.jax_internals import PATCHED, PJIT_CALL
  >>> PJIT_CALL.path
  'jax._src.pjit._pjit_call_impl_python'
  >>> PJIT_CALL in PATCHED, callable(PJIT_CALL.get())
  (True, True)
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = [
    "DEVICE_PUT",
    "FAST_PATH_DATA",
    "FROM_BLOCKS",
    "FROM_BLOCKS_EXPORTED",
    "FROM_CALLBACK",
    "FROM_CALLBACK_EXPORTED",
    "INTERNALS",
    "PATCHED",
    "PJIT_CACHE_EXPLICIT",
    "PJIT_CACHE_FUN_ONLY",
    "PJIT_CALL",
    "PJIT_FUNCTION_CACHE",
    "USER_FRAME",
    "USER_FRAMES",
    "XLA_BACKENDS",
    "Internal",
]


@dataclasses.dataclass(frozen=True)
class Internal:
    """One attribute of a JAX module that the checker relies on.

    Attributes:
      module: the module's import name, e.g. ``"jax._src.pjit"``.
      name: the attribute's name in it (dotted for an attribute of an attribute).
      patched: whether the recorder replaces it (else it only reads or calls it).
      why: what the checker needs it for.
    """

    module: str
    name: str
    patched: bool
    why: str

    @property
    def path(self) -> str:
        """``module.name``."""
        return f"{self.module}.{self.name}"

    def get(self, *default: Any) -> Any:
        """The attribute's value now (``default`` if given and the attribute is missing)."""
        found: Any = importlib.import_module(self.module)
        for part in self.name.split("."):
            found = getattr(found, part, *default)
        return found

    def set(self, value: Any) -> None:
        """Replace the attribute with ``value``."""
        owner, _, last = self.name.rpartition(".")
        holder = importlib.import_module(self.module)
        setattr(
            Internal(self.module, owner, self.patched, self.why).get() if owner else holder,
            last,
            value,
        )


PJIT_CALL = Internal(
    "jax._src.pjit",
    "_pjit_call_impl_python",
    patched=True,
    why="runs every jit program (eager operations too) that is off the C++ fast path: "
    "replaced, it records the program's text, traced primitives, inputs and outputs",
)
FAST_PATH_DATA = Internal(
    "jax._src.pjit",
    "_get_fastpath_data",
    patched=True,
    why="decides whether a call goes on the C++ fast path, where it would run unseen: "
    "replaced, it returns None while a recording lasts",
)
DEVICE_PUT = Internal(
    "jax._src.dispatch",
    "_batched_device_put_impl",
    patched=True,
    why="every jax.device_put and transfer from the host: replaced, it records the copy",
)
FROM_CALLBACK = Internal(
    "jax._src.array",
    "make_array_from_callback",
    patched=True,
    why="an array put together from host data, block by block: a copy from the host",
)
FROM_CALLBACK_EXPORTED = Internal(
    "jax",
    "make_array_from_callback",
    patched=True,
    why="jax's export of the same function, bound when jax was imported: replaced too",
)
FROM_BLOCKS = Internal(
    "jax._src.array",
    "make_array_from_single_device_arrays",
    patched=True,
    why="an array put together from arrays on single devices: a copy of them",
)
FROM_BLOCKS_EXPORTED = Internal(
    "jax",
    "make_array_from_single_device_arrays",
    patched=True,
    why="jax's export of the same function, bound when jax was imported: replaced too",
)
PJIT_CACHE_FUN_ONLY = Internal(
    "jax._src.pjit",
    "_cpp_pjit_cache_fun_only",
    patched=False,
    why="the C++ fast path's entries of jit functions: cleared when a recording starts",
)
PJIT_CACHE_EXPLICIT = Internal(
    "jax._src.pjit",
    "_cpp_pjit_cache_explicit_attributes",
    patched=False,
    why="the same, for jit functions with explicit attributes: cleared too",
)
PJIT_FUNCTION_CACHE = Internal(
    "jax._src.lib",
    "_jax.PjitFunctionCache",
    patched=False,
    why="its clear_all() drops every fast-path entry, those of jax.jit objects included",
)
USER_FRAME = Internal(
    "jax._src.source_info_util",
    "user_frame",
    patched=False,
    why="the innermost line of user code an equation of a traced program came from",
)
USER_FRAMES = Internal(
    "jax._src.source_info_util",
    "user_frames",
    patched=False,
    why="every line of user code an equation came from, innermost first",
)
XLA_BACKENDS = Internal(
    "jax._src.xla_bridge",
    "_backends",
    patched=False,
    why="the backends started so far: the zygote checks that its imports started none, "
    "so that each worker forked from it can still choose its device count",
)

INTERNALS = (
    PJIT_CALL,
    FAST_PATH_DATA,
    DEVICE_PUT,
    FROM_CALLBACK,
    FROM_CALLBACK_EXPORTED,
    FROM_BLOCKS,
    FROM_BLOCKS_EXPORTED,
    PJIT_CACHE_FUN_ONLY,
    PJIT_CACHE_EXPLICIT,
    PJIT_FUNCTION_CACHE,
    USER_FRAME,
    USER_FRAMES,
    XLA_BACKENDS,
)
"""Every private attribute of JAX the checker uses."""

PATCHED = tuple(internal for internal in INTERNALS if internal.patched)
"""The ones the recorder replaces (and checks are still its own: ``_Hooks.intact``)."""
