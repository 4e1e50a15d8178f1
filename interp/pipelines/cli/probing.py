"""Future-necessity commands: ``label`` (targets) and ``probe`` (task-level nested CV)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.cli.common import TrajectoriesOpt, app, config_options, console
from interp.reporting.numbers import ci_text, num
from interp.schema import as_number, as_numbers, as_object
from probes.config import ProbeConfig
from probes.targets import TargetLabelerConfig


class _JudgeSwitch(TyperCommand):
    """``interp label --judge ...`` runs ``interp labels judge ...``: one command, its options declared there only."""

    # contexts are Any: typer >= 0.12 takes click's Context, newer typer its own vendored copy of it
    def make_context(self, info_name: str | None, args: list[str],
                     parent: Any = None,  # Any: click's Context or typer's vendored copy
                     **extra: Any) -> Any:  # Any: click's context settings; click's or typer's Context
        """The judge's context when ``--judge`` is among the options (before ``--``), else ``label``'s own."""
        head = args[:args.index("--")] if "--" in args else args
        if "--judge" not in head:
            return super().make_context(info_name, args, parent, **extra)
        from interp.pipelines.cli.annotate import labels_app

        group = typer.main.get_command(labels_app)
        assert isinstance(group, TyperGroup)
        rest = list(args)
        rest.remove("--judge")
        return group.commands["judge"].make_context(f"{info_name} --judge", rest, parent, **extra)


@app.command(cls=_JudgeSwitch, epilog="With --judge: G and y labels from an OpenAI-compatible chat model instead, "
             "the guideline as its rubric; the options are those of `interp labels judge` (interp label --judge "
             "--help).")
@config_options(TargetLabelerConfig, skip=("cues",))  # the guideline's cue list; Python API only
def label(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for future_necessity_labels.json and .csv.")],
    labels: Annotated[Optional[Path], typer.Option(help="Reference CSV task_id,after_step,future_necessity "
                                                        "(default: the annotations).")] = None,
    *,
    config: TargetLabelerConfig,
) -> None:
    """Rule-based future-necessity targets with evidence, and agreement (kappa) with reference labels."""
    check_output_dir(out, "--out")
    summary = stages.label(trajectories, out, labels, config)
    console.print(f"{out}: {summary['n_boundaries']} boundaries, {summary['n_positive']} positive; "
                  f"agreement {summary['agreement']}", markup=False)


@app.command()
@config_options(ProbeConfig)
def probe(
    store: Annotated[Path, typer.Option("--store", help="Activation store directory.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for probe_results.json and oof_predictions.csv.")],
    labels: Annotated[Optional[Path], typer.Option(help="CSV task_id,after_step,future_necessity (default: annotations).")] = None,
    condition: Annotated[str, typer.Option(help="Condition of the samples to probe.")] = "full",
    site: Annotated[str, typer.Option(help="Hooked site of the features.")] = "resid_pre",
    *,
    config: ProbeConfig,
) -> None:
    """Task-level nested-CV future-necessity probes on a store: gain over the position baseline, AUROC, AP, CIs, p."""
    check_output_dir(out, "--out")
    result = stages.probe(store, out, config, labels, condition, site)
    gain = result["gain"]
    ci = as_numbers(gain["auroc_ci"]) if gain else None
    lead = (f"gain over position baseline {num(as_number(gain['auroc']), signed=True)}"
            + (f" {ci_text(ci, signed=True)}" if ci_text(ci, signed=True) else "")
            + f" (baseline AUROC {as_object(result['baseline'])['auroc']:.3f}); " if gain else "")
    console.print(f"{lead}AUROC {result['auroc']:.3f} {ci_text(result['auroc_ci']) or '(no CI)'}, AP {result['ap']:.3f}, "
                  f"balanced acc {result['balanced_accuracy']:.3f}, p={result['permutation_p']} (across tasks), "
                  f"p={result['permutation_p_position']} (position kept), {config.permutation} statistic; "
                  f"{result['n_excluded_final']} final boundaries excluded -> {out / 'probe_results.json'}",
                  markup=False, highlight=False)
