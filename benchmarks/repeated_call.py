"""Latency of a repeated call of each reference solution, against jit on pre-sharded input.

For each function the benchmark times a call on a plain array, as a reader makes it
(the function validates, places the input on the mesh and runs its compiled
``shard_map``), and the same ``jnp`` expression under ``jax.jit`` on an input that is
already laid out on the same devices: what automatic parallelism costs for the same
work, with no data movement. It prints the medians and their ratio (target: <= 3x),
and, for scale, one un-jitted ``shard_map`` call, which compiles every time.

Run it with ``nox -s bench`` or ``python benchmarks/repeated_call.py [--devices 8]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from shard_tutorial import use_cpu_devices


def median_latency(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> float:
    """Median seconds per call of ``fn(*args)``, waiting for each result."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Time every function and its baseline, then print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices (default 8)")
    parser.add_argument("--calls", type=int, default=200, help="calls per timing (default 200)")
    parser.add_argument("--trials", type=int, default=7, help="interleaved timings (default 7)")
    options = parser.parse_args()
    use_cpu_devices(options.devices)

    import jax.numpy as jnp  # noqa: PLC0415 (after the device count is set)
    from flax import nnx  # noqa: PLC0415
    from jax.sharding import NamedSharding  # noqa: PLC0415
    from jax.sharding import PartitionSpec as P  # noqa: PLC0415

    import shard_tutorial as st  # noqa: PLC0415

    rng = np.random.default_rng(0)
    vector = jnp.asarray(rng.normal(size=4096).astype(np.float32))
    matrix = jnp.asarray(rng.normal(size=(512, 64)).astype(np.float32))
    model = nnx.Linear(64, 32, rngs=nnx.Rngs(0))
    kernel, bias = model.kernel[...], model.bias[...]
    # The same model with its parameters already copied to every device once, as a
    # training loop keeps them: data_parallel_forward then has only x to place.
    replicated_model = nnx.Linear(64, 32, rngs=nnx.Rngs(0))
    nnx.update(
        replicated_model,
        st.place(nnx.state(replicated_model), NamedSharding(st.data_mesh(512), P())),
    )

    def placed(x: jax.Array) -> jax.Array:
        return jax.device_put(x, NamedSharding(st.data_mesh(x.shape[0]), P("data")))

    def replicated(x: jax.Array, like: jax.Array) -> jax.Array:
        return jax.device_put(x, NamedSharding(st.data_mesh(like.shape[0]), P()))

    # name: (reference call, its arguments, baseline jitted expression, its pre-placed arguments)
    rows: dict[str, tuple[Callable[..., Any], tuple[Any, ...], Callable[..., Any], tuple[Any, ...]]]
    rows = {
        "shard_map_double": (
            st.shard_map_double,
            (vector,),
            jax.jit(lambda x: x * 2.0),
            (placed(vector),),
        ),
        "shard_map_vs_vmap": (
            st.shard_map_vs_vmap,
            (matrix,),
            jax.jit(lambda x: jnp.stack([jnp.sum(x**2, axis=1)] * 2)),
            (placed(matrix),),
        ),
        "shard_map_psum": (st.shard_map_psum, (vector,), jax.jit(jnp.sum), (placed(vector),)),
        "shard_map_simulate": (
            st.shard_map_simulate,
            (0, matrix, 8, 32),
            jax.jit(lambda x, w, b: (x @ w + b).reshape(-1)),
            (placed(matrix), replicated(kernel, matrix), replicated(bias, matrix)),
        ),
        "data_parallel_forward": (
            st.data_parallel_forward,
            (model, matrix),
            jax.jit(lambda x, w, b: x @ w + b),
            (placed(matrix), replicated(kernel, matrix), replicated(bias, matrix)),
        ),
        "  ...params on the mesh": (
            st.data_parallel_forward,
            (replicated_model, matrix),
            jax.jit(lambda x, w, b: x @ w + b),
            (placed(matrix), replicated(kernel, matrix), replicated(bias, matrix)),
        ),
    }

    for fn, args, base, base_args in rows.values():  # compile and warm up
        for _ in range(20):
            jax.block_until_ready(fn(*args))
            jax.block_until_ready(base(*base_args))

    ours: dict[str, list[float]] = {name: [] for name in rows}
    baseline: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(options.trials):  # interleaved, so drifts in machine load hit both sides
        for name, (fn, args, base, base_args) in rows.items():
            ours[name].append(median_latency(fn, args, options.calls))
            baseline[name].append(median_latency(base, base_args, options.calls))

    mesh = st.data_mesh(vector.shape[0])
    unjitted = jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    unjitted_s = median_latency(unjitted, (placed(vector),), 5)

    print(
        f"jax {jax.__version__}, {jax.device_count()} CPU devices; median of {options.trials} "
        f"interleaved medians of {options.calls} calls"
    )
    header = (
        f"{'function':<24}{'input':>12}{'ours (us)':>12}{'jit on pre-sharded (us)':>26}{'ratio':>8}"
    )
    print(header)
    print("-" * len(header))
    for name, (_, args, _, _) in rows.items():
        array = next(a for a in args if isinstance(a, jax.Array))
        mine, theirs = statistics.median(ours[name]), statistics.median(baseline[name])
        shape = "x".join(map(str, array.shape))
        print(
            f"{name:<24}{shape:>12}{mine * 1e6:>12.0f}{theirs * 1e6:>26.0f}{mine / theirs:>7.2f}x"
        )
    double_base = statistics.median(baseline["shard_map_double"])
    print(
        f"\nfor scale: un-jitted shard_map doubling {vector.shape[0]} elements: "
        f"{unjitted_s * 1e3:.0f} ms per call ({unjitted_s / double_base:.0f}x the jit baseline)"
    )


if __name__ == "__main__":
    main()
