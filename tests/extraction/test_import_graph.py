"""One home per rule, read from the source: one prefix scheduler, no import circle between extraction modules or
in probes, and no patching module that imports the extraction layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
USERS = ["interp/extraction/extract.py", "interp/extraction/entropy.py", "patching/patch.py", "patching/kl_repair.py",
         "patching/harm.py"]


def _imports(path: Path) -> set[str]:
    """Every module imported anywhere in ``path`` (function bodies and TYPE_CHECKING blocks included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.parametrize("package", ["interp/extraction", "probes"])
def test_no_import_circle(package):
    graph = {_module(p): {m for m in _imports(p) if m.startswith(package.replace("/", "."))}
             for p in (ROOT / package).glob("*.py")}

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for m in graph.get(todo.pop(), ()):
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return seen
    assert [m for m in graph if m in reach(m)] == []


def test_patching_does_not_import_extraction():
    bad = {_module(p): sorted(m for m in _imports(p) if m.startswith("interp.extraction"))
           for p in (ROOT / "patching").glob("*.py")}
    assert {m: v for m, v in bad.items() if v} == {}


def test_one_scheduler_and_no_departure_loop_in_its_users():
    homes = [p.relative_to(ROOT).as_posix() for pkg in ("interp", "probes", "patching")
             for p in (ROOT / pkg).rglob("*.py") if re.search(r"^def (lcp|run_branches|departure)\(", p.read_text(), re.M)]
    assert homes == ["interp/sensor/prefix.py"]
    for name in USERS:  # they ask the scheduler; none takes or picks snapshots itself
        text = (ROOT / name).read_text()
        assert not re.search(r"snapshots=|\.snapshots\b|start=\w|lcp\(", text), name
