"""The README's Python quick start runs as written (on the tiny model it names), from the repository root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def quick_start() -> str:
    """The first python block after the README's ``## Quick start (Python)`` heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quick start (Python)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_quick_start_runs(monkeypatch, capsys):
    code = quick_start()
    assert 'load_model("tiny-qwen3.5")' in code
    monkeypatch.chdir(ROOT)
    scope: dict = {"__name__": "readme"}
    exec(compile(code, "README.md", "exec"), scope)
    result = scope["result"]
    assert len(result.patched) == scope["sensor"].n_layers
    assert abs(result.patched[0] - result.target) < 1e-5  # layer 0 at the same token: the same embedding
    assert "[1, 1, 64]" in capsys.readouterr().out.replace("torch.Size(", "").replace(")", "")
