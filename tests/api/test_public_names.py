"""Every public name of ``interp`` resolves lazily to the function or class its module defines."""

from __future__ import annotations

import importlib

import pytest

import interp

pytestmark = pytest.mark.unit


def test_public_names_resolve():
    for name in interp.__all__:
        assert getattr(interp, name) is getattr(importlib.import_module(interp._LAZY[name]), name), name
    assert {"load_model", "run_with_cache", "run_with_hooks", "hooks", "Store", "render", "apply_condition",
            "patch", "kl_repair_trajectory", "boundary_harm", "run_probe", "extract_to_store"} <= set(interp.__all__)
    assert callable(interp.patch) and interp.patch.__module__ == "patching.patch"
