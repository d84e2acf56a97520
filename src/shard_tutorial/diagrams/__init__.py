"""Pictures drawn from real arrays: what each device holds, before and after a collective."""

from __future__ import annotations

from shard_tutorial.diagrams.collectives import Diagram, device_blocks, diagram

__all__ = ["Diagram", "device_blocks", "diagram"]
