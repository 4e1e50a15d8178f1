"""The user guide's capability table and the providers module's are the code's table."""

from __future__ import annotations

from pathlib import Path

import pytest

import interp.serve.providers as providers

pytestmark = pytest.mark.unit

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "online-providers.md"


def test_the_guide_quotes_the_code_table():
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("<!-- providers table: interp.serve.providers.table() -->\n")
    end = text.index("<!-- end providers table -->")
    quoted = text[start:end].split("\n", 1)[1]
    assert quoted == providers.table()
    assert len(quoted.strip().splitlines()) == 2 + len(providers.PROVIDERS)


def test_the_module_docstring_table_is_the_code_table():
    assert providers.table() in (providers.__doc__ or "")
