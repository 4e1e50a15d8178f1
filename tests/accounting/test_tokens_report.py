"""Figure 8 and the report section from a real tokens.json (hand tokenizer, paired run): the figure checks of
tests/figures and the reference study's ICLR changes beside ours."""

from __future__ import annotations

import pytest

from interp.accounting.tokens import CacheModel, run_accounting
from interp.reporting import reference as ref
from interp.reporting.figures.tokens import tokens_figure, tokens_section
from tests.figures.test_figure_quality import CLAIM, needs_chromium, overprinted, unlabelled

from .test_tokens import TOK, three_steps

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def doc() -> dict:
    base = [three_steps(f"t{i}") for i in range(3)]
    longer = [three_steps(f"t{i}", extra=i) for i in range(3)]
    return run_accounting(base, ["full", "delete_all_reasoning", "sliding_window:k=1", "iclr"], TOK,
                          CacheModel(), paired=(longer, "delete_all_reasoning"))


@needs_chromium
def test_figure_ticks_do_not_overprint(doc):
    assert not overprinted(tokens_figure(doc))  # needs the full layout (kaleido's Chromium)


def test_figure_passes_the_figure_checks(doc):
    fig = tokens_figure(doc)
    assert not unlabelled(fig) and not CLAIM.search(fig.layout.title.text)
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["input read from the cache", "input written to the cache", "output"]
    full = next(r for r in doc["totals"] if r["policy"] == "full")
    assert sum(t.x[0] for t in bars) == full["input_tokens"] + full["output_tokens"]
    assert "paired amplification" in fig.layout.title.subtitle.text


def test_section_puts_the_reference_changes_beside_ours(doc):
    text = "\n".join(tokens_section(doc))
    assert f"{ref.TOKENS['iclr']['input']:+.1%}" not in text  # iclr was skipped here (no entropy table) ...
    assert "iclr not accounted: no entropy table" in text
    row = next(line for line in text.splitlines() if line.startswith("| delete_all_reasoning |"))
    mine = next(r for r in doc["totals"] if r["policy"] == "delete_all_reasoning")
    assert f"{mine['rel_input']:+.1%}" in row and f"{mine['input_tokens']:,}" in row
    assert "amplification" in text and "Paired runs (delete_all_reasoning, 3 tasks" in text
    with_iclr = {**doc, "totals": [*doc["totals"], {**doc["totals"][0], "policy": "iclr"}]}
    iclr_row = next(line for line in tokens_section(with_iclr) if line.startswith("| iclr |"))
    assert iclr_row.endswith("| -25.5% / -33.3% / -14.4% |")  # ... and beside ours once iclr is accounted
