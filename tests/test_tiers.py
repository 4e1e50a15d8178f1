"""Every test module has exactly one tier: a module-level ``pytestmark`` naming unit, parity or e2e.

Two checks: the test files themselves (parsed, so a module that a ``-m``
selection left out is still checked), and the collected items of this session
(the markers pytest actually applied). See tests/README.md for the tiers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "parity", "e2e")


def _mark_name(node: ast.expr) -> str | None:
    """``pytest.mark.NAME`` (or ``pytest.mark.NAME(...)``) -> NAME."""
    if isinstance(node, ast.Call):
        node = node.func
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest"):
        return node.attr
    return None


def module_tiers(source: str) -> list[str]:
    """The tiers named by the module-level ``pytestmark`` of a test module's source ([] when it has none)."""
    tiers: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            continue
        marks = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
        tiers += [name for name in map(_mark_name, marks) if name in TIERS]
    return tiers


def tier_problems(root: Path) -> list[str]:
    """One line per test module under ``root`` without exactly one tier."""
    problems = []
    for path in sorted(root.rglob("test_*.py")):
        tiers = module_tiers(path.read_text(encoding="utf-8"))
        if len(tiers) != 1:
            what = "no tier" if not tiers else f"{len(tiers)} tiers {tiers}"
            problems.append(f"{path.relative_to(root)}: {what}; add `pytestmark = pytest.mark.<{'|'.join(TIERS)}>` "
                            "after the imports")
    return problems


def test_every_test_module_has_exactly_one_tier():
    assert len(list(TESTS.rglob("test_*.py"))) > 20
    problems = tier_problems(TESTS)
    assert not problems, "\n".join(problems)


def test_the_check_catches_missing_and_double_tiers(tmp_path):
    (tmp_path / "test_ok.py").write_text("import pytest\n\npytestmark = pytest.mark.parity\n")
    (tmp_path / "test_slow_list.py").write_text("import pytest\n\npytestmark = [pytest.mark.e2e, pytest.mark.slow]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_none.py").write_text("import pytest\n\n\n@pytest.mark.unit\ndef test_x():\n    pass\n")
    (tmp_path / "test_slow_only.py").write_text("import pytest\n\npytestmark = pytest.mark.slow\n")
    (tmp_path / "test_two.py").write_text("import pytest\n\npytestmark = [pytest.mark.unit, pytest.mark.e2e]\n")
    (tmp_path / "test_nested.py").write_text("import pytest\n\n\ndef f():\n    pytestmark = pytest.mark.unit\n")
    (tmp_path / "helper.py").write_text("x = 1\n")  # not a test module
    problems = tier_problems(tmp_path)
    assert [p.split(":")[0] for p in problems] == ["sub/test_none.py", "test_nested.py", "test_slow_only.py",
                                                   "test_two.py"]
    assert "2 tiers ['unit', 'e2e']" in problems[-1]


def test_collected_items_carry_exactly_one_tier(request):
    """The markers pytest applied: catches a tier set in a way the file check does not read."""
    wrong = {}
    for item in request.session.items:
        tiers = sorted({m.name for m in item.iter_markers() if m.name in TIERS})
        if len(tiers) != 1:
            wrong[item.nodeid] = tiers
    assert not wrong, wrong


def uses_real_weights(item: pytest.Item) -> bool:
    """Whether a collected test loads real SmolLM2 (its fixture, or a ``smollm2`` parameter)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "smol_sensor" in getattr(item, "fixturenames", ()) or "smollm2-135m" in params.values()


def test_tests_on_real_weights_are_slow_and_not_unit(request):
    """``-m unit`` and ``-m "parity and not slow"`` must not select a test that loads real SmolLM2 weights."""
    wrong = [item.nodeid for item in request.session.items if uses_real_weights(item)
             and (item.get_closest_marker("slow") is None or item.get_closest_marker("unit") is not None)]
    assert not wrong, wrong
