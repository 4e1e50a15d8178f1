"""Fixtures of the e2e tier: the tiny model loaded once for in-process CLI runs."""

from __future__ import annotations

from functools import cache

import pytest

from interp.sensor.models import load_model as real_load_model


@cache
def tiny():
    """The tiny random Qwen3.5 on the CPU in fp32, loaded once per session."""
    return real_load_model("tiny-qwen3.5")


@pytest.fixture
def cached_model(monkeypatch):
    """``load_model`` returns the one tiny model (other specs, devices and dtypes still go through the real loader)."""
    import interp.sensor.models as models

    def load(spec, device="cpu", dtype="float32", model_path=None, **kwargs):
        if spec == "tiny-qwen3.5" and str(device) == "cpu" and dtype in ("fp32", "float32") and model_path is None:
            return tiny()
        return real_load_model(spec, device=device, dtype=dtype, model_path=model_path, **kwargs)
    monkeypatch.setattr(models, "load_model", load)


@pytest.fixture(scope="session")
def tiny_model():
    """The session's tiny model (the one ``cached_model`` hands out)."""
    return tiny()
