"""Figures of the mechanistic analyses, made from result files only (no model).

Each figure is a pure function of one result file (``probe_figure(dict)``,
``iclr_figure(DataFrame)``, ...) returning a ``plotly.graph_objects.Figure``
in the one template of ``interp.reporting.figures.theme``; ``make_figures`` finds the
files of a results directory, makes every figure whose input exists and
writes ``figures/<name>.html`` (offline; all load the one ``figures/plotly.min.js``) and ``.png``::

    from interp.reporting.figures import make_figures, kl_repair_figure
    report = make_figures(Path("results/demo"))      # HTML + PNG of what exists
    print(summary(report, Path("results/demo/figures")))  # what was written, skipped, failed
    kl_repair_figure(load_result(Path("results/demo/patching/kl_repair.json"))).show()

Result files are read with ``load_result``, which checks each against the
fields its writer declares (the registry's ``ResultFile`` schema, the writer module's
``FIELDS``), so a file that does not match fails naming the file and the
field, not deep inside plotly.

PNG needs a Chromium (``apt-get install chromium``); without one the HTML is
still written and the report says what is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from interp.io import read_json
from interp.reporting.analyses import ANALYSES, FiguresReport, resolve, schemas
from interp.reporting.figures.attention import attention_figure
from interp.reporting.figures.drsr import (attention_density_figure, granularity_figure, interaction_figure,
                                          relations_figure)
from interp.reporting.figures.export import find_chromium, write_html, write_pngs
from interp.reporting.figures.externalization import externalization_figure
from interp.reporting.figures.harm import harm_figure
from interp.reporting.figures.iclr import iclr_figure
from interp.reporting.figures.interventions import interventions_figure
from interp.reporting.figures.kl_repair import kl_repair_figure
from interp.reporting.figures.probe import probe_figure, roc_pr_figure
from interp.reporting.figures.theme import PALETTE, SEGMENT_COLOURS, TEMPLATE
from interp.schema import Field, SchemaError, check, check_columns


@dataclass(frozen=True)
class FigureSpec:
    """A figure: its file name, the result file it is made from (relative to the results dir) and its builder."""

    name: str
    source: str
    build: Callable[[Any], go.Figure]


# every figure of the registry (interp.reporting.analyses), in its order
FIGURES = tuple(FigureSpec(f.name, a.path(f.file), resolve(f.build)) for a in ANALYSES for f in a.figures)

def result_fields(path: Path) -> Sequence[Field] | None:
    """The fields the writer of ``path`` declares (by file name, in the registry), or None for a file without any."""
    where = schemas().get(Path(path).name)
    return resolve(where) if where else None


def load_result(path: Path, fields: Sequence[Field] | None = None) -> dict[str, Any] | pd.DataFrame:
    """A result file as a dict (.json) or a DataFrame (.csv), checked against its writer's fields.

    ``fields`` defaults to ``result_fields(path)``; a file that does not match
    raises ``interp.schema.SchemaError`` naming the file and the field. A table's record
    (its name as ``.json``: config and provenance, ``interp.record``) is in ``frame.attrs["record"]``.
    """
    path = Path(path)
    fields = result_fields(path) if fields is None else fields
    if path.suffix == ".csv":
        frame = pd.read_csv(path)
        if fields:
            check_columns(frame.columns, fields, path)
        if path.with_suffix(".json").is_file():  # the record of what made the table (config, provenance)
            frame.attrs["record"] = load_result(path.with_suffix(".json"))
        return frame
    doc = read_json(path)
    return check(doc, fields, path) if fields else doc


def make_figures(results_dir: Path, png: bool = True) -> FiguresReport:
    """Make every figure whose result file exists under results_dir into results_dir/figures; report what and why not.

    Returns {"written": {name: [html, png?]}, "skipped": {name: reason},
    "failed": {name: "file: error"}, "png_skipped": reason or None}. Prints
    nothing: callers print ``summary(report, results_dir / "figures")``.
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
        except SchemaError as exc:  # names the file and the field
            failed[spec.name] = str(exc)
        except KeyError as exc:  # a field the builder needs is absent
            failed[spec.name] = f"{source}: missing field {exc}"
        except (ValueError, TypeError, IndexError) as exc:
            failed[spec.name] = f"{source}: {exc}"
    written = {name: [write_html(fig, out_dir / f"{name}.html")] for name, fig in figures.items()}
    png_skipped: str | None = "png=False"
    if png:
        paths, png_skipped = write_pngs(figures, out_dir)
        for path in paths:
            written[path.stem].append(path)
    return FiguresReport(written=written, skipped=skipped, failed=failed, png_skipped=png_skipped)


def summary(report: FiguresReport, out_dir: Path) -> str:
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
    "FIGURES", "PALETTE", "SEGMENT_COLOURS", "TEMPLATE", "FigureSpec", "attention_density_figure", "attention_figure",
    "externalization_figure", "find_chromium", "granularity_figure", "harm_figure", "iclr_figure",
    "interaction_figure", "interventions_figure", "kl_repair_figure", "load_result", "make_figures", "probe_figure",
    "relations_figure", "result_fields", "roc_pr_figure", "summary",
]
