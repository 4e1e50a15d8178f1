"""report.md opens each section with its pictures (relative PNG links that exist) and the report folder
(report.md, figures/, tables/) stays under 10 MB: one plotly.js for all HTML figures."""

from __future__ import annotations

import re

import pytest

from interp.pipelines import stages
from interp.reporting.figures import FIGURES, export
from interp.reporting.report import write_report

from .conftest import write_results

pytestmark = pytest.mark.unit


@pytest.mark.skipif(export.find_chromium() is None, reason="no Chromium for kaleido (apt-get install chromium)")
def test_report_embeds_every_png_and_the_folder_is_small(tmp_path):
    root = write_results(tmp_path)
    made = stages.figures(root, png=True)
    assert made["png_skipped"] is None
    text = write_report(root, {}, {}, {"model": "toy", "full": False}).read_text()
    embedded = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", text)
    assert sorted(embedded) == sorted(f"figures/{spec.name}.png" for spec in FIGURES)
    assert all((root / link).is_file() for link in embedded)
    assert text.splitlines()[2] == "## Future-necessity probe" and text.splitlines()[4].startswith("![fig1_probe]"), \
        "report.md opens with a picture"
    first_section = text.split("\n## ", 1)[1]
    assert first_section.splitlines()[2].startswith("![fig1_probe]"), "a section opens with its picture"
    assert "| estimate |" in first_section.split("\n## ")[0], "the picture sits beside its table"
    size = sum(p.stat().st_size for folder in ("figures", "tables") for p in (root / folder).iterdir())
    size += (root / "report.md").stat().st_size
    assert size < 10 * 2 ** 20, f"report folder {size / 2 ** 20:.1f} MB"
    assert len(list((root / "figures").glob("plotly*.js"))) == 1


def test_without_pngs_the_report_links_the_html(tmp_path):
    root = write_results(tmp_path)
    stages.figures(root, png=False)
    text = write_report(root, {}, {}, {"model": "toy", "full": False}).read_text()
    assert "![" not in text and "(figures/fig2_kl_repair.html)" in text
