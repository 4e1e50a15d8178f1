"""Fixtures of the foundation tests: the trajectory corpora (mini always, demo when written)."""

from __future__ import annotations

import functools

import pytest

from ._support import DEMO, MINI, token_counter


@pytest.fixture(scope="session", params=["mini", "demo"])
def corpus(request):
    """``(name, trajectories)``: the mini file always; the demo set once its file exists."""
    from interp.data.trajectory import load_trajectories

    if request.param == "demo":
        if not DEMO.exists():
            pytest.skip(f"{DEMO} is not written yet (the mini corpus runs the same checks)")
        return "demo", request.getfixturevalue("demo_trajectories")
    return "mini", load_trajectories(MINI)


@pytest.fixture(scope="session")
def counter(tokenizer):
    """Token counter of the parametrized tokenizer (no special tokens), memoized: tests call it a lot."""
    return functools.lru_cache(maxsize=None)(token_counter(tokenizer))
