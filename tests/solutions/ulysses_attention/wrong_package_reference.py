"""Shortcut: the package's own reference imported and called."""

from shard_tutorial import ulysses_attention as _reference

VERDICT = "reference"
PHRASE = "the package's own solution"


def ulysses_attention(q, k, v, causal=False):
    return _reference(q, k, v, causal)
