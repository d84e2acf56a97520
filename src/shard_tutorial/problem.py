"""What a practice problem is: a reference solution, an independent oracle and cases.

Each module in :mod:`shard_tutorial.problems` defines one :class:`Problem`. That
one definition is what the problem's page renders, what the tests check the
reference solution against, and what a checker runs a reader's solution on, so
the statement, the cases and the solution cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Case", "Problem", "precise"]


@dataclasses.dataclass(frozen=True)
class Case:
    """One input of a problem, with the label a report shows for it.

    Attributes:
      label: what the case exercises, e.g. ``"length 5: 8 devices do not divide it"``.
      args: the positional arguments, NumPy arrays and Python numbers, so a case
        can be built in any process before JAX picks its devices.
    """

    label: str
    args: tuple[Any, ...]

    def jax_args(self) -> tuple[Any, ...]:
        """The arguments as a caller passes them: arrays become ``jax.Array``.

        Returns:
          ``args`` with every NumPy array converted by ``jnp.asarray``.

        Examples:
          >>> import numpy as np
          >>> from shard_tutorial.problem import Case
          >>> Case("two", (np.array([1.0, 2.0]), 3.0)).jax_args()
          (Array([1., 2.], dtype=float32), 3.0)
        """
        return tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in self.args)


@dataclasses.dataclass(frozen=True)
class Problem:
    """A practice problem: the function to write, how to check it, and on what.

    Attributes:
      name: the function a solution defines, e.g. ``"shard_map_double"``. Its
        page is ``problems/<name with dashes>``.
      title: the page title, e.g. ``"shard_map basics"``.
      reference: the reference solution. Its signature and docstring are the
        problem statement.
      oracle: an independent NumPy computation of the expected output, written
        without JAX's sharding so it can catch sharding mistakes.
      make_cases: builds the cases, deterministically (called once, lazily).
      rtol: relative tolerance when comparing with the oracle.
      atol: absolute tolerance when comparing with the oracle.
    """

    name: str
    title: str
    reference: Callable[..., jax.Array]
    oracle: Callable[..., np.ndarray]
    make_cases: Callable[[], Sequence[Case]] = dataclasses.field(repr=False)
    rtol: float = 1e-5
    atol: float = 1e-6

    @functools.cached_property
    def cases(self) -> tuple[Case, ...]:
        """The problem's cases: the statement's examples first, then generated ones."""
        return tuple(self.make_cases())

    @property
    def summary(self) -> str:
        """The first line of the reference solution's docstring."""
        return (inspect.getdoc(self.reference) or self.name).splitlines()[0]

    @property
    def page(self) -> str:
        """The problem's page in the documentation, relative to the docs root."""
        return "problems/" + self.name.replace("_", "-")

    def expected(self, case: Case) -> np.ndarray:
        """The oracle's answer for ``case``, in the dtype JAX's default mode produces.

        The oracle computes in NumPy, often at 64-bit precision; the expected dtype
        is that result's dtype as JAX would store it with 64-bit mode off
        (``float64`` becomes ``float32``, ``int64`` becomes ``int32``).

        Args:
          case: one of :attr:`cases`, or any case with this problem's arguments.

        Returns:
          A NumPy array: the expected output.
        """
        out = np.asarray(self.oracle(*case.args))
        return out.astype(jax.dtypes.canonicalize_dtype(out.dtype))

    def describe(self, case: Case) -> str:
        """A one-line account of a case's arguments: shapes and dtypes of arrays, values of numbers.

        Args:
          case: a case of this problem.

        Returns:
          The arguments by parameter name, e.g. ``"x=float32[5]"``.

        Examples:
          >>> from shard_tutorial.problems import get_problem
          >>> problem = get_problem("shard_map_simulate")
          >>> problem.describe(problem.cases[0])
          'seed=0.0, x=float32[8,4], num_shards=2.0, features=3.0'
        """
        names = inspect.signature(self.reference).parameters
        return ", ".join(f"{n}={_describe_value(a)}" for n, a in zip(names, case.args, strict=True))


def precise(array: np.ndarray) -> np.ndarray:
    """``array`` widened to 64 bits of the same kind, for an oracle to compute in.

    Integers become ``int64``, floats ``float64`` and complex numbers ``complex128``,
    so an oracle's arithmetic is more precise than JAX's 32-bit arithmetic while
    its result dtype still says what JAX produces (see :meth:`Problem.expected`).

    Args:
      array: a NumPy array of numbers.

    Returns:
      A NumPy array with the same values and a 64-bit (or complex128) dtype.

    Examples:
      >>> import numpy as np
      >>> from shard_tutorial.problem import precise
      >>> precise(np.array([1, 2], np.int32)).dtype, precise(np.ones(2, np.float32)).dtype
      (dtype('int64'), dtype('float64'))
    """
    array = np.asarray(array)
    kind = array.dtype.kind
    wide = {"b": np.int64, "i": np.int64, "u": np.uint64, "f": np.float64, "c": np.complex128}
    return array.astype(wide[kind])


def _describe_value(value: object) -> str:
    if isinstance(value, np.ndarray | jax.Array):
        return f"{value.dtype}[{','.join(map(str, value.shape))}]"
    return repr(value)
