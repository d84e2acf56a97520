"""Mistake: the package's own reference, imported and called: not the reader's code."""

from shard_tutorial import moe_top2 as _reference

VERDICT = "reference"
PHRASE = "package's own solution"


def moe_top2(x, router_logits, w, capacity):
    return _reference(x, router_logits, w, capacity)
