"""Every library module imports under ``python -OO`` (docstrings stripped): no value is parsed from a docstring."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def library_modules() -> list[str]:
    """Every module of the three packages, by dotted name."""
    names = []
    for package in ("interp", "probes", "patching"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":  # importing it runs the CLI
                continue
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_with_docstrings_stripped():
    modules = library_modules()
    assert len(modules) > 50 and "interp.io" in modules and "patching.harm" in modules
    script = ("import importlib, sys\n"
              "if sys.flags.optimize != 2 or importlib.import_module('interp.io').__doc__ is not None:\n"
              "    sys.exit('docstrings were not stripped')\n"
              f"for name in {modules!r}:\n"
              "    importlib.import_module(name)\n")
    done = subprocess.run([sys.executable, "-OO", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
