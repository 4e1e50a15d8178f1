"""The registry of analyses: one record per analysis says where its results live and how they are reported.

Every reader of a results directory goes through :data:`ANALYSES`:
``interp.reporting.figures`` (``FIGURES``, the schema of each result file),
``interp.reporting.tables`` (``write_tables``), ``interp.reporting.report``
(the sections of ``report.md``), the demo (where each stage's result goes;
its stage functions are attached in ``interp.pipelines.stages.STEPS``) and
the synthetic fixtures of ``tests/figures/conftest.py``. A record names

- ``folder``: the analysis's folder in a results directory, ``result``: the
  file whose presence means it ran (``path()`` is ``folder/result``);
- ``files``: every file of the folder with a declared schema, as
  ``ResultFile(name, "writer.module:FIELDS")``;
- ``figures``, ``tables``, ``section``: the builders, as
  ``"module:function"`` (imported on first use, so reading the registry
  imports neither plotly nor the analyses): a figure builder takes the loaded
  file and returns a plotly figure, a table builder the loaded file and
  returns a DataFrame, a section builder ``(result, folder)`` and returns the
  Markdown lines under its ``title``;
- ``reference``: the reference study's numbers it is compared with
  (``interp.reporting.reference``).

Adding an analysis is one record here (docs/contributing.md, "Adding an analysis"). The
order of :data:`ANALYSES` is the order of ``report.md``'s sections.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypedDict

from interp.reporting import reference as ref


def resolve(target: str) -> Any:  # Any: what the reference names (a builder, a FIELDS tuple); its entry says which
    """The object a ``"package.module:name"`` reference names (the module is imported on first use)."""
    module, _, name = target.partition(":")
    if not name:
        raise ValueError(f"{target!r}: expected 'module:name'")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ResultFile:
    """A file of an analysis's folder and the ``Field`` tuple its writer declares (``"module:NAME"``)."""

    name: str
    schema: str


@dataclass(frozen=True)
class Figure:
    """A figure: its file stem under ``figures/``, the analysis file it is drawn from and its builder."""

    name: str
    file: str
    build: str


class FiguresReport(TypedDict):
    """What ``interp.reporting.figures.make_figures`` did with the figures: name -> files written, skipped and
    failed figures with why, and why PNGs are missing (None: written)."""

    written: dict[str, list[Path]]
    skipped: dict[str, str]
    failed: dict[str, str]
    png_skipped: str | None


@dataclass(frozen=True)
class Table:
    """A headline table: its file stem under ``tables/``, the analysis file it reads, its builder and caption."""

    name: str
    file: str
    build: str
    caption: str


@dataclass(frozen=True)
class Analysis:
    """One analysis's results layout and reporting (module docstring)."""

    name: str
    title: str
    folder: str
    result: str
    files: tuple[ResultFile, ...] = ()
    figures: tuple[Figure, ...] = ()
    tables: tuple[Table, ...] = ()
    section: str | None = None
    reference: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def path(self, file: str | None = None) -> str:
        """``folder/file`` (default: the result file), relative to a results directory."""
        return f"{self.folder}/{file or self.result}"


ANALYSES: tuple[Analysis, ...] = (
    Analysis(
        "probe", "Future-necessity probe", "probe", "probe_results.json",
        files=(ResultFile("probe_results.json", "probes.report:FIELDS"),
               ResultFile("oof_predictions.csv", "probes.report:OOF_FIELDS")),
        figures=(Figure("fig1_probe", "probe_results.json", "interp.reporting.figures.probe:probe_figure"),
                 Figure("fig1b_probe_roc_pr", "oof_predictions.csv", "interp.reporting.figures.probe:roc_pr_figure")),
        tables=(Table("probe", "probe_results.json", "interp.reporting.tables:probe_table",
                      "Future-necessity probe, task-level nested cross-validation (95% CIs: task bootstrap)."),),
        section="interp.reporting.report:probe_section",
        reference=MappingProxyType({"probe": ref.PROBE})),
    Analysis(
        "kl_repair", "KL Repair (activation patching)", "patching", "kl_repair.json",
        files=(ResultFile("kl_repair.json", "patching.kl_repair:FIELDS"),),
        figures=(Figure("fig2_kl_repair", "kl_repair.json", "interp.reporting.figures.kl_repair:kl_repair_figure"),),
        tables=(Table("kl_repair", "kl_repair.json", "interp.reporting.tables:kl_repair_table",
                      "KL Repair of the boundary token at the layers nearest the reference study's (same relative "
                      "depth)."),),
        section="interp.reporting.report:repair_section",
        reference=MappingProxyType({"kl_repair": ref.KL_REPAIR, "n_layers": ref.N_LAYERS})),
    Analysis(
        "attribution", "Attribution maps: first-order KL Repair and harm beside the exact values", "attribution",
        "attribution.json",
        files=(ResultFile("attribution.json", "patching.attribution:FIELDS"),),
        figures=(Figure("fig18_attribution", "attribution.json",
                        "interp.reporting.figures.attribution:attribution_figure"),),
        section="interp.reporting.report:attribution_section"),
    Analysis(
        "iclr", "ICLR block entropy", "iclr", "iclr_blocks.csv",
        files=(ResultFile("iclr_blocks.csv", "interp.extraction.entropy:DROP_TABLE_FIELDS"),
               ResultFile("iclr_blocks.json", "interp.extraction.entropy:TABLE_RECORD_FIELDS")),
        figures=(Figure("fig6_iclr", "iclr_blocks.csv", "interp.reporting.figures.iclr:iclr_figure"),),
        section="interp.reporting.report:iclr_section"),
    Analysis(
        "harm", "Set-level deletion harm (DRSR)", "harm", "harm.json",
        files=(ResultFile("harm.json", "patching.harm:FIELDS"),),
        figures=(Figure("fig7_harm", "harm.json", "interp.reporting.figures.harm:harm_figure"),),
        tables=(Table("harm", "harm.json", "interp.reporting.tables:harm_table",
                      "Set-level deletion harm (DRSR): set harm predicted from singleton harms, by aggregator and "
                      "set size."),),
        section="interp.reporting.report:harm_section"),
    Analysis(
        "drsr", "DRSR appendix: granularity, relations across depth, interaction, attention", "drsr", "drsr.json",
        files=(ResultFile("drsr.json", "patching.drsr:FIELDS"),),
        figures=tuple(Figure(name, "drsr.json", f"interp.reporting.figures.drsr:{build}") for name, build in (
            ("fig8_granularity", "granularity_figure"), ("fig9_relations", "relations_figure"),
            ("fig10_interaction", "interaction_figure"), ("fig11_attention_density", "attention_density_figure"))),
        section="interp.reporting.report:drsr_report_section"),
    Analysis(
        "gate", "DRSR set-risk gate: learned set harm, largest safe deletion, abstention", "gate", "gate.json",
        files=(ResultFile("gate.json", "patching.gate_eval:FIELDS"),
               ResultFile("gate_scorer.json", "patching.gate:SCORER_FIELDS")),
        figures=tuple(Figure(name, "gate.json", f"interp.reporting.figures.gate:{build}") for name, build in (
            ("fig13_gate_scores", "scores_figure"), ("fig14_gate_operating_curve", "operating_curve_figure"),
            ("fig15_gate_beta", "beta_figure"))),
        section="interp.reporting.figures.gate:gate_section",
        reference=MappingProxyType({"gate": ref.DRSR_GATE})),
    Analysis(
        "externalization", "State externalization", "externalization", "externalization.json",
        files=(ResultFile("externalization.json", "interp.externalization.risk:FIELDS"),),
        figures=(Figure("fig3_externalization", "externalization.json",
                        "interp.reporting.figures.externalization:externalization_figure"),),
        tables=(Table("externalization", "externalization.json", "interp.reporting.tables:externalization_table",
                      "State externalization G and future behavioural risk."),),
        section="interp.reporting.report:risk_section",
        reference=MappingProxyType({"risk": ref.RISK, "within_task_gap": ref.WITHIN_TASK_GAP,
                                    "hidden_score_gap": ref.HIDDEN_SCORE_GAP})),
    Analysis(
        "interventions", "Controlled continuations", "interventions", "interventions.json",
        files=(ResultFile("interventions.json", "interp.continuations.run:FIELDS"),),
        figures=(Figure("fig4_interventions", "interventions.json",
                        "interp.reporting.figures.interventions:interventions_figure"),),
        tables=(Table("interventions", "interventions.json", "interp.reporting.tables:interventions_table",
                      "Controlled continuations: one next turn by the sensor under each edited history (not a final "
                      "task score); mean rubric score, truncated turns counted apart."),),
        section="interp.reporting.report:continuation_section",
        reference=MappingProxyType({"continuations": ref.CONTINUATIONS})),
    Analysis(
        "tokens", "Token accounting of history policies", "tokens", "tokens.json",
        files=(ResultFile("tokens.json", "interp.accounting.tokens:FIELDS"),),
        figures=(Figure("fig12_tokens", "tokens.json", "interp.reporting.figures.tokens:tokens_figure"),),
        section="interp.reporting.figures.tokens:tokens_section",
        reference=MappingProxyType({"tokens": ref.TOKENS})),
    Analysis(
        "anchors", "Reasoning anchors: deletion, receiver heads, attention suppression, ICLR's drops", "anchors",
        "anchors.json",
        files=(ResultFile("anchors.json", "patching.anchors:FIELDS"),),
        figures=(Figure("fig16_anchors", "anchors.json", "interp.reporting.figures.anchors:anchors_figure"),),
        section="interp.reporting.figures.anchors:anchors_section"),
    Analysis(
        "sae", "SAE features at the boundary: reconstruction, probe, named features", "sae", "sae_probe.json",
        files=(ResultFile("sae_probe.json", "probes.sae:FIELDS"),),
        figures=(Figure("fig17_sae", "sae_probe.json", "interp.reporting.figures.anchors:sae_figure"),),
        section="interp.reporting.figures.anchors:sae_section"),
    Analysis(
        "attention", "Attention", "attention", "attention.json",
        files=(ResultFile("attention.json", "interp.extraction.attention_summary:FIELDS"),),
        figures=(Figure("fig5_attention", "attention.json", "interp.reporting.figures.attention:attention_figure"),),
        section="interp.reporting.report:attention_section"),
)


def analysis(name: str) -> Analysis:
    """The record named ``name``; a KeyError lists the registered names."""
    for record in ANALYSES:
        if record.name == name:
            return record
    raise KeyError(f"no analysis {name!r}; registered: {', '.join(a.name for a in ANALYSES)}")


def schemas() -> dict[str, str]:
    """Result file name -> ``"module:NAME"`` of its declared fields, over every analysis (names are unique)."""
    return {f.name: f.schema for a in ANALYSES for f in a.files}
