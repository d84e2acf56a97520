"""Shortcut: the package's own reference solution, imported and called."""

from shard_tutorial.problems.pipeline_train_step import pipeline_train_step as _theirs

VERDICT = "reference"
PHRASE = "package's own solution"


def pipeline_train_step(x, y, w):
    return _theirs(x, y, w)
