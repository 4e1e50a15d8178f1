"""Fixtures of the extraction tests: both sensors behind one parameter, seeded token sequences."""

from __future__ import annotations

import pytest

from ._reference import random_ids


@pytest.fixture(scope="session", params=["tiny-qwen3.5", pytest.param("smollm2-135m", marks=pytest.mark.slow)])
def sensor(request):
    """Each sensor in turn (session-scoped, read-only): the hybrid tiny Qwen3.5 and real SmolLM2."""
    return request.getfixturevalue("tiny_sensor" if request.param == "tiny-qwen3.5" else "smol_sensor")


@pytest.fixture(scope="session")
def short_ids(sensor):
    """A seeded random sequence short enough for a SmolLM2 CPU forward in about a second."""
    return random_ids(sensor, 96, seed=11)
