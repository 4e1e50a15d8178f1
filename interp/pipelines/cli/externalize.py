"""``interp externalize``: rule-based G labels with evidence, and future risk by G."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines import stages
from interp.externalization.labeler import GapLabelerConfig
from interp.externalization.risk import RiskConfig
from interp.pipelines.cli.common import (
    TrajectoriesOpt,
    app,
    config_options,
    console,
)
from interp.reporting.numbers import ci_text, num
from interp.reporting.numbers import pct as pct_text
from interp.schema import as_list, as_number, as_numbers, as_object

externalize_app = typer.Typer(help="State externalization: rule-based G labels with evidence, and future risk by G.",
                              no_args_is_help=True)
app.add_typer(externalize_app, name="externalize")


@externalize_app.command("label")
@config_options(GapLabelerConfig)
def externalize_label(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for externalization_labels.json/.csv and "
                                                    "externalization_evidence.csv.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="Reference CSV task_id,after_step,"
                                                   "externalization_gap (default: the annotations).")] = None,
    *,
    config: GapLabelerConfig,
) -> None:
    """Rule-based G labels with per-item evidence; Cohen's kappa against reference labels, in-sample and held out by task."""
    check_output_dir(out, "--out")
    summary = stages.externalize(trajectories, out, labels, config)
    line = (f"{out}: {summary['n_boundaries']} boundaries, scope {config.scope} ({summary['scope_note']}), "
            f"rule G=1 for {summary['rule_positive_rate']:.1%}")
    agreement = summary["agreement"]
    if agreement["n"]:
        line += (f"; vs {summary['reference']} (n={agreement['n']}): kappa {agreement['kappa']} (in-sample), accuracy "
                 f"{agreement['accuracy']}, confusion [[ref0 rule0, ref0 rule1], [ref1 rule0, ref1 rule1]] "
                 f"{agreement['confusion']}")
    console.print(line, markup=False, highlight=False)
    for name, value in (summary["held_out"] or {}).items():
        report = as_object(value)
        held = as_object(report["held_out"])
        ci = as_numbers(held["kappa_ci"])
        console.print(f"held-out kappa, {name} labeler: {held['kappa']} {ci_text(ci) or '[-, -]'} "
                      f"on {held['n']} boundaries of {len(as_list(report['eval_tasks']))} tasks "
                      f"(thresholds tuned on {len(as_list(report['tune_tasks']))} other tasks: {report['chosen']})",
                      markup=False, highlight=False)


@externalize_app.command("risk")
@config_options(RiskConfig)
def externalize_risk(
    out: Annotated[Path, typer.Option("--out", help="Directory for externalization.json.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="CSV task_id,after_step,externalization_gap "
                                                   "(e.g. externalization_labels.csv; may hold future_necessity "
                                                   "too). Default: annotations of --trajectories.")] = None,
    probe_results: Annotated[Optional[Path], typer.Option("--probe-results", help="oof_predictions.csv, or the "
                                                          "`interp probe` directory holding it.")] = None,
    trajectories: Annotated[Optional[Path], typer.Option("--trajectories", help="Trajectory file: annotations "
                                                         "for G or y where no CSV gives them.")] = None,
    targets: Annotated[Optional[Path], typer.Option("--targets", help="CSV task_id,after_step,future_necessity "
                                                    "(default: --labels' column, else annotations).")] = None,
    *,
    config: RiskConfig,
) -> None:
    """Future behavioural risk by G: P(y|G=1), P(y|G=0), within-task gap, hidden-score gap, with task-bootstrap CIs."""
    from interp.reporting import reference

    check_output_dir(out, "--out")
    doc = stages.risk(out, labels, probe_results, trajectories, targets, config)

    def pct(stat: dict) -> str:
        ci = stat["ci"]
        if stat["estimate"] is None:
            return "-"
        interval = ci_text(ci, scale=100)
        return f"{pct_text(stat['estimate'])}" + (f" {interval}" if interval else "")

    g1, g0, within = doc["p_y_given_g1"], doc["p_y_given_g0"], doc["within_task_gap"]
    console.print(f"P(y=1|G=1) {pct(g1)} (n={g1['n']}) vs P(y=1|G=0) {pct(g0)} (n={g0['n']}); reference "
                  f"{100 * reference.RISK['G1']:.1f}% vs {100 * reference.RISK['G0']:.1f}%", markup=False)
    console.print(f"within-task gap {pct(within).replace('%', ' pp', 1)} over {within['n_tasks']} tasks; "
                  f"reference {100 * reference.WITHIN_TASK_GAP:.1f} pp", markup=False)
    if doc["hidden_score_gap"] is not None:
        hidden = doc["hidden_score_gap"]
        logodds, prob = as_object(hidden["logodds"]), as_object(hidden["probability"])
        if logodds["estimate"] is not None:
            console.print(f"hidden-score gap {num(as_number(logodds['estimate']))} log-odds "
                          f"{ci_text(as_numbers(logodds['ci']))}, {num(as_number(prob['estimate']))} probability "
                          f"{ci_text(as_numbers(prob['ci']))} over {logodds['n_tasks']} "
                          f"tasks; reference {reference.HIDDEN_SCORE_GAP} (probability)", markup=False)
    console.print(f"-> {out / 'externalization.json'}", markup=False)
