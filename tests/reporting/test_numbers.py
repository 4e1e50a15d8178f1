"""One number formatter: ``interp.reporting.numbers`` writes every number of tables, report.md and figure labels."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from interp.reporting.numbers import NA, ci_text, num, pct, shown

pytestmark = pytest.mark.unit

REPORTING = Path(__file__).resolve().parents[2] / "interp" / "reporting"
# figures/gate.py is rewritten on the gate branch (#38); its private _num goes with that merge
PENDING = {"figures/gate.py"}


def test_numbers_as_written():
    assert [num(0.1234), num(-0.00004), num(0.05, signed=True), num(None)] == ["0.123", "0.000", "+0.050", None]
    assert [pct(0.673), pct(-0.041, signed=True), pct(0.0, signed=True), pct(None)] == ["67.3%", "-4.1%", "+0.0%", None]
    assert [shown(num(None)), shown(ci_text([0.1, None])), shown(ci_text([0.1, 0.25]))] == [NA, NA, "[0.100, 0.250]"]


def test_no_private_number_formatter_in_reporting():
    """A module-level ``_num``/``_f``/``_pct``/``_ci``... helper is a second formatter that drifts from this one."""
    found = [f"{path.relative_to(REPORTING)}: {node.name}" for path in sorted(REPORTING.rglob("*.py"))
             if str(path.relative_to(REPORTING)) not in PENDING
             for node in ast.parse(path.read_text()).body
             if isinstance(node, ast.FunctionDef) and node.name in ("_num", "_fmt", "_f", "_pct", "_p", "_ci", "_format")]
    assert not found, found
