"""Every problem's statement, as its built page shows it, says how its arguments arrive.

Issue 37, item 6: a solution that slices ``x`` eagerly fails on 8 devices only when
the statement does not say that ``x`` arrives split over an Explicit mesh. These read
the HTML that ``nox -s docs`` has just built into docs/_build/html.
"""

from __future__ import annotations

import pytest
from built_pages import page

from shard_tutorial import PROBLEMS


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_the_statement_says_how_the_arguments_arrive(name: str) -> None:
    problem = PROBLEMS[name]
    statement = page(problem.page).select_one("dl.py.function")
    assert statement is not None
    text = " ".join(statement.get_text(" ").split())
    assert text.count("How the arguments arrive:") == 1, text[:500]
    if problem.arrange is None:
        assert "each array as a jax.Array on the default device, not split" in text
    else:
        assert "placed on the Explicit mesh" in text


def test_the_moe_statement_names_each_arguments_spec() -> None:
    statement = page(PROBLEMS["expert_parallel_moe"].page).select_one("dl.py.function")
    assert statement is not None
    text = " ".join(statement.get_text(" ").split())
    assert 'x , router_logits and w each as P("expert")' in text or (
        'x, router_logits and w each as P("expert")' in text
    )
