"""Give a process several CPU devices, so sharded code runs on a laptop.

XLA can split the host CPU into any number of *fake* devices. Each one is a real
JAX device with its own memory and its own slice of every sharded array; they
share the CPU's cores, so they teach the SPMD model faithfully but run no faster
than one device. The device count is fixed when JAX starts its backend, which
happens at the first operation (creating an array, calling ``jax.devices()``),
so :func:`use_cpu_devices` must run before that.
"""

from __future__ import annotations

import jax

from shard_tutorial.validation import require_count

__all__ = ["join_cpu_cluster", "use_cpu_devices"]


def use_cpu_devices(count: int) -> None:
    """Make JAX start with ``count`` CPU devices (and use the CPU platform).

    Call it right after ``import jax``, before any JAX operation. Calling it again
    with the count the backend already has is allowed and does nothing, so a
    notebook cell that calls it can be re-run.

    Args:
      count: how many CPU devices JAX should create, at least 1.

    Raises:
      TypeError: if ``count`` is not an integer.
      ValueError: if ``count`` is less than 1.
      RuntimeError: if JAX's backend already started with a different set of
        devices; restart the process (or the notebook kernel) and call this first.

    Examples:
      In a fresh process (the doctests of this package run with 8 devices set up
      this way before they start)::

          >>> import jax
          >>> from shard_tutorial import use_cpu_devices
          >>> use_cpu_devices(8)
          >>> jax.device_count()
          8

      Asking for a different count once JAX has started is an error that says
      what to do:

          >>> use_cpu_devices(4)
          Traceback (most recent call last):
          ...
          RuntimeError: use_cpu_devices(4) came too late: JAX already started with 8 cpu device(s)...
    """
    count = require_count(count, "count", unit=" number of devices")
    try:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        # JAX refuses once its backend exists. That is fine if the backend already
        # has what was asked for (a notebook cell run twice); otherwise say so.
        devices = jax.devices()
        if len(devices) == count and all(d.platform == "cpu" for d in devices):
            return
        msg = (
            f"use_cpu_devices({count}) came too late: JAX already started with "
            f"{len(devices)} {devices[0].platform} device(s). The device count is fixed at "
            "JAX's first operation; call use_cpu_devices right after `import jax` in a fresh "
            "process (restart the notebook kernel)."
        )
        raise RuntimeError(msg) from None


def join_cpu_cluster(coordinator: str, processes: int, process: int) -> None:
    """Join JAX's distributed runtime as process ``process`` of a CPU cluster (gloo collectives).

    What every process of a cluster on this machine runs, the launcher's scripts
    (:func:`shard_tutorial.join_cluster`) and the checker's workers alike, after
    :func:`use_cpu_devices` and before any JAX operation. It also turns JAX's
    persistent compilation cache off in this process: with jax 0.12.1, a
    2-process cluster whose program was read back from the cache hangs in its
    first collective (the program compiled afresh runs; measured with
    ``shard_map_psum``, and a clean run of ``nox -s distributed`` hung in every
    test that launched the same script a second time). A cluster's programs have
    keys of their own, so the cache seldom had one to give back.

    Args:
      coordinator: ``host:port`` of process 0's coordinator.
      processes: how many processes the cluster has.
      process: this process' index, from 0.

    Examples:
      The launcher's scripts call it through :func:`shard_tutorial.join_cluster`;
      alone, a cluster of one process joins at once::

          >>> join_cpu_cluster("127.0.0.1:12345", 1, 0)  # doctest: +SKIP
    """
    jax.config.update("jax_enable_compilation_cache", False)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=processes, process_id=process
    )
