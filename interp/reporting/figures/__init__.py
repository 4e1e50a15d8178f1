"""Figures of the mechanistic analyses, made from result files only (no model).

Each figure is a pure function of one result file (``probe_figure(dict)``,
``iclr_figure(DataFrame)``, ...) returning a ``plotly.graph_objects.Figure``
in the one template of ``interp.reporting.figures.theme``; ``make_figures`` finds the
files of a results directory, makes every figure whose input exists and
writes ``figures/<name>.html`` (self-contained, offline) and ``.png``::

    from interp.reporting.figures import make_figures, kl_repair_figure
    report = make_figures(Path("results/demo"))      # HTML + PNG of what exists
    report["skipped"]                                 # {"fig3_externalization": "no externalization/..."}
    kl_repair_figure(json.load(open("results/demo/patching/kl_repair.json"))).show()

PNG needs a Chromium (``apt-get install chromium``); without one the HTML is
still written and the report says what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from interp.reporting.figures.attention import attention_figure
from interp.reporting.figures.export import find_chromium, write_html, write_pngs
from interp.reporting.figures.externalization import externalization_figure
from interp.reporting.figures.harm import harm_figure
from interp.reporting.figures.iclr import iclr_figure
from interp.reporting.figures.interventions import interventions_figure
from interp.reporting.figures.kl_repair import kl_repair_figure
from interp.reporting.figures.probe import probe_figure, roc_pr_figure
from interp.reporting.figures.theme import PALETTE, TEMPLATE


@dataclass(frozen=True)
class FigureSpec:
    """A figure: its file name, the result file it is made from (relative to the results dir) and its builder."""

    name: str
    source: str
    build: Callable[[Any], go.Figure]


FIGURES = (
    FigureSpec("fig1_probe", "probe/probe_results.json", probe_figure),
    FigureSpec("fig1b_probe_roc_pr", "probe/oof_predictions.csv", roc_pr_figure),
    FigureSpec("fig2_kl_repair", "patching/kl_repair.json", kl_repair_figure),
    FigureSpec("fig3_externalization", "externalization/externalization.json", externalization_figure),
    FigureSpec("fig4_interventions", "interventions/interventions.json", interventions_figure),
    FigureSpec("fig5_attention", "attention/attention.json", attention_figure),
    FigureSpec("fig6_iclr", "iclr/iclr_blocks.csv", iclr_figure),
    FigureSpec("fig7_harm", "harm/harm.json", harm_figure),
)


def load_result(path: Path) -> Any:
    """A result file as a dict (.json) or a DataFrame (.csv)."""
    if path.suffix == ".csv":
        return pd.read_csv(path)
    return json.loads(path.read_text(encoding="utf-8"))


def make_figures(results_dir: Path, png: bool = True) -> dict:
    """Make every figure whose result file exists under results_dir into results_dir/figures; report what and why not.

    Returns {"written": {name: [html, png?]}, "skipped": {name: reason},
    "failed": {name: "file: error"}, "png_skipped": reason or None}; prints one
    summary line (and one line when PNGs could not be made).
    """
    results_dir = Path(results_dir)
    out_dir = results_dir / "figures"
    figures: dict[str, go.Figure] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    for spec in FIGURES:
        source = results_dir / spec.source
        if not source.is_file():
            skipped[spec.name] = f"no {spec.source}"
            continue
        try:
            figures[spec.name] = spec.build(load_result(source))
        except KeyError as exc:  # a field the builder needs is absent
            failed[spec.name] = f"{source}: missing field {exc}"
        except (ValueError, TypeError, IndexError) as exc:
            failed[spec.name] = f"{source}: {exc}"
    written = {name: [write_html(fig, out_dir / f"{name}.html")] for name, fig in figures.items()}
    png_skipped = "png=False"
    if png:
        paths, png_skipped = write_pngs(figures, out_dir)
        for path in paths:
            written[path.stem].append(path)
    report = {"written": written, "skipped": skipped, "failed": failed, "png_skipped": png_skipped}
    print(summary(report, out_dir))
    return report


def summary(report: dict, out_dir: Path) -> str:
    """The printed report: one line of what was written, skipped and failed, then why PNGs are missing if they are."""
    kinds = "HTML+PNG" if report["png_skipped"] is None else "HTML"
    parts = [f"figures: {len(report['written'])} written to {out_dir} ({kinds})"]
    if report["skipped"]:
        parts.append("skipped " + ", ".join(f"{name} ({why})" for name, why in report["skipped"].items()))
    if report["failed"]:
        parts.append("FAILED " + ", ".join(f"{name} ({why})" for name, why in report["failed"].items()))
    lines = ["; ".join(parts)]
    if report["png_skipped"] not in (None, "png=False") and report["written"]:
        lines.append(report["png_skipped"])
    return "\n".join(lines)


__all__ = [
    "FIGURES", "PALETTE", "TEMPLATE", "FigureSpec", "attention_figure", "externalization_figure", "find_chromium",
    "harm_figure", "iclr_figure", "interventions_figure", "kl_repair_figure", "load_result", "make_figures",
    "probe_figure", "roc_pr_figure",
]
