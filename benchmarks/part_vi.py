"""What each Part VI reference sends and holds per device, and the pipeline schedules' memory.

Run: ``python benchmarks/part_vi.py`` (8 CPU devices). For each of the four problems of
Part VI, its reference is called on the largest of its statement's cases, recorded as
the checker records a reader's answer (:func:`shard_tutorial.checking.worker.answer_of`),
and the programs that call ran are read: their collectives (kind, bytes per device, how
many runs), the bytes each device sends (ring algorithms,
:func:`shard_tutorial.collective_costs.sent_by`) and the most one device holds while a
program runs (XLA's memory analysis: arguments, outputs and temporaries, less aliases,
plus what earlier programs left alive). Then GPipe, 1F1B and interleaved 1F1B on
16 layers over 8 stages with ``M = 32 = 4n`` microbatches, as the pipeline page measures
them: the bubble, the microbatches device 0 keeps, and the temporaries XLA allocates.
"""

from __future__ import annotations

from shard_tutorial import use_cpu_devices

use_cpu_devices(8)  # before JAX starts, so the imports below come after it

import jax
import jax.numpy as jnp
import numpy as np

from shard_tutorial import get_problem
from shard_tutorial.checking.worker import answer_of
from shard_tutorial.collective_costs import sent_by
from shard_tutorial.problems.pipeline_train_step import (
    scheduled_train_step,
    tick_tables,
)

PART_VI = ("pipeline_train_step", "ulysses_attention", "moe_top2", "zero_adam_step")


def _held(memory: dict[str, int], before: int) -> int:
    parts = ("argument", "output", "temp")
    return sum(memory.get(k, 0) for k in parts) - memory.get("alias", 0) + before


def reference_costs(name: str) -> None:
    """Print what the reference sends and holds on the largest statement case."""
    problem = get_problem(name)
    cases = [c for c in problem.cases if c.raises is None]
    case = max(cases, key=lambda c: sum(np.size(a) for a in c.args if isinstance(a, np.ndarray)))
    made = answer_of(problem.reference, problem.arranged(case))
    programs = made.how.programs
    sent, found = 0.0, []
    for program in programs:
        bytes_sent, collectives = sent_by(program.text, program.devices)
        sent += bytes_sent
        found += collectives
    kinds: dict[tuple[str, int], int] = {}
    for c in found:
        kinds[(c.kind, c.nbytes)] = kinds.get((c.kind, c.nbytes), 0) + 1
    held = max((_held(dict(p.memory), p.held_before) for p in programs), default=0)
    mesh = "x".join(map(str, problem.mesh_shape(case, jax.device_count())))
    print(f"{name}: {case.label} (mesh {mesh})")
    listed = ", ".join(f"{n} {kind} of {size:,} B" for (kind, size), n in sorted(kinds.items()))
    print(f"  collectives (each run counted): {listed or 'none'}")
    print(f"  sent per device: {sent:,.0f} B; most held by one device: {held:,} B")


def schedules() -> None:
    """GPipe, 1F1B and interleaved 1F1B at M = 4n on 8 stages, as the pipeline page runs them."""
    rng = np.random.default_rng(1)
    microbatches, rows, features, layers = 32, 4, 16, 16
    xs = jnp.asarray(rng.normal(size=(microbatches, rows, features)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=(microbatches, rows, features)), jnp.float32)
    ws = jnp.asarray(rng.normal(size=(layers, features, features)) / 4, jnp.float32)
    print(f"pipeline schedules: L={layers} on 8 stages, M={microbatches}, B={rows}, D={features}")
    for kind, chunks in [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)]:
        _, _, ran, compiled = scheduled_train_step(xs, ys, ws, kind, chunks)
        _, _, slots = tick_tables(8, microbatches, kind, chunks)
        temp = compiled().memory_analysis().temp_size_in_bytes
        print(
            f"  {kind:<12} {ran.span:>4} ticks, bubble {ran.bubble:.3f}, device 0 keeps "
            f"{ran.activations()[0]:g} microbatches ({slots} slots per chunk), "
            f"temporaries {temp:,} B"
        )
    print(f"  one microbatch's activation: {rows * features * 4} B")


if __name__ == "__main__":
    for problem_name in PART_VI:
        reference_costs(problem_name)
    schedules()
