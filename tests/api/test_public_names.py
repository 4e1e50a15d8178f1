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


def test_import_interp_stays_light():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "import sys, interp; interp.__all__; dir(interp); assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env={"PYTHONPATH": str(root)})
