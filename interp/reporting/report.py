"""``report.md``: every headline number of a results directory beside the reference study's.

Result files are read with ``interp.reporting.figures.load_result`` (checked against their
writers' ``FIELDS``); a file that does not match gives a section naming the file and field.
Reference values come only from ``interp.reporting.reference``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from interp.data.conditions import ICLR_RHO
from interp.io import atomic_write_bytes

from interp.reporting import reference as ref
from interp.reporting.figures import load_result
from interp.reporting.figures.externalization import externalization_sections
from interp.reporting.figures.interventions import intervention_conditions
from interp.schema import SchemaError


def _load(path: Path) -> Any:
    return load_result(path) if path.exists() else None


def _section(build: Callable[[Path], list[str]], out: Path) -> list[str]:
    """A section's lines, or one line naming the file and field when a result file does not match its schema."""
    try:
        return build(out)
    except SchemaError as exc:
        return [f"_not readable: {exc}_"]


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and None not in ci else "n/a"


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _probe_section(out: Path) -> list[str]:
    res = _load(out / "probe" / "probe_results.json")
    if res is None:
        return ["_not run_"]
    chosen = ", ".join(f"L{f.get('layer')}/{f.get('pooling')}" for f in res.get("folds", []))
    return [
        f"n = {res['n_samples']} boundaries from {res['n_tasks']} tasks ({res['n_positive']} positive); "
        f"permutation p = {_fmt(res.get('permutation_p'))}; control-task AUROC = {_fmt(res.get('control_auroc'))}.",
        "", "| metric | this run | 95% CI (task bootstrap) | reference study |", "|---|---|---|---|",
        f"| AUROC | {_fmt(res['auroc'])} | {_ci(res.get('auroc_ci'))} | {ref.PROBE['auroc']} |",
        f"| AP | {_fmt(res['ap'])} | {_ci(res.get('ap_ci'))} | {ref.PROBE['ap']} |",
        f"| balanced accuracy | {_fmt(res['balanced_accuracy'])} | | {ref.PROBE['balanced_accuracy']} |",
        "", f"Layer/pooling chosen per outer fold: {chosen}. Reference setting: {ref.MODEL}, "
        f"{ref.PROBE['n_tasks']} tasks, {ref.PROBE['n_samples']} boundaries ({ref.PROBE['n_positive']} positive), "
        "task-level nested CV.",
        "", "Figures: [probe](figures/fig1_probe.html), [ROC/PR](figures/fig1b_probe_roc_pr.html).",
    ]


def _repair_section(out: Path) -> list[str]:
    res = _load(out / "patching" / "kl_repair.json")
    if res is None:
        return ["_not run_"]
    lines = [f"Condition `{res['condition']}`, {res['n_samples']} boundaries ({res['n_excluded']} excluded with "
             f"KL(P_full||P_del) below threshold), method `{res['method']}`.", "",
             "| site | Repair | 95% CI | top-1 recovery |", "|---|---|---|---|"]
    n = len(res["sites"])
    picks = sorted({0, n // 4, n // 2, (3 * n) // 4, n - 2, n - 1} & set(range(n)))
    mean, top1 = res["repair_mean"] or [None] * n, res["top1_mean"] or [None] * n  # empty: no sample kept
    ci = res["repair_ci"] or [None] * n
    for i in picks:
        lines.append(f"| {res['sites'][i]} | {_fmt(mean[i])} | {_ci(ci[i])} | {_fmt(top1[i])} |")
    points = ", ".join(f"layer {k}: {v}" for k, v in ref.KL_REPAIR.items())
    return lines + ["", f"Reference study ({ref.MODEL}): {points}.", "", "Figure: [KL Repair](figures/fig2_kl_repair.html)."]


def _iclr_section(out: Path) -> list[str]:
    path = out / "iclr" / "iclr_blocks.csv"
    if not path.exists():
        return ["_not run_"]
    frame = load_result(path)
    dropped = frame[frame["dropped"]]
    return [f"{len(frame)} reasoning blocks in {frame.groupby(['task_id', 'step']).ngroups} steps; mean entropy "
            f"{frame['mean_entropy_bits'].mean():.3f} bits/token (sd {frame['mean_entropy_bits'].std():.3f}). "
            f"At rho = {ICLR_RHO} ICLR drops {len(dropped)} blocks ({len(dropped) / max(len(frame), 1):.1%}), "
            f"{int(dropped['n_tokens'].sum())} of {int(frame['n_tokens'].sum())} reasoning tokens "
            f"({dropped['n_tokens'].sum() / max(frame['n_tokens'].sum(), 1):.1%}).",
            "", "Figure: [ICLR](figures/fig6_iclr.html)."]


def _harm_section(out: Path) -> list[str]:
    res = _load(out / "harm" / "harm.json")
    if res is None:
        return ["_not run_"]
    lines = [f"{len(res['boundaries'])} boundaries.", "",
             "| cardinality | mean interaction (nats/token) | sets | pair-ordering accuracy of the additive prediction |",
             "|---|---|---|---|"]
    for k, row in res["per_cardinality"].items():
        lines.append(f"| {k} | {_fmt(row['mean_interaction'])} | {row['n_sets']} | {_fmt(row['pair_ordering_accuracy'])} |")
    return lines + ["", "Figure: [set-level harm](figures/fig7_harm.html)."]


def _risk_section(out: Path) -> list[str]:
    res = _load(out / "externalization" / "externalization.json")
    if res is None:
        return ["_not run_"]
    sec = externalization_sections(res)
    risk, within, hidden = sec.get("risk", {}), sec.get("within_task", {}), sec.get("hidden_score", {})
    g1, g0 = risk.get("G1", {}), risk.get("G0", {})
    labels = _load(out / "externalization" / "externalization_labels.json") or {}
    agree = labels.get("agreement") or {}
    kappa = (f"Rule-based G labeler vs hand annotations: Cohen's kappa {agree.get('kappa')}, accuracy "
             f"{agree.get('accuracy')}, n = {agree.get('n')}, confusion {agree.get('confusion')}. "
             "The risk below uses the annotations' G and y." if agree.get("n") else "")
    return [kappa, "", "| quantity | this run | 95% CI | n | reference study |", "|---|---|---|---|---|",
            f"| P(y=1 given G=1) | {_fmt(g1.get('p'))} | {_ci(g1.get('ci'))} | {g1.get('n')} | {ref.RISK['G1']} |",
            f"| P(y=1 given G=0) | {_fmt(g0.get('p'))} | {_ci(g0.get('ci'))} | {g0.get('n')} | {ref.RISK['G0']} |",
            f"| within-task gap | {_fmt(within.get('gap'))} | {_ci(within.get('ci'))} | {within.get('n_tasks')} tasks | "
            f"{ref.WITHIN_TASK_GAP} |",
            f"| hidden-score gap | {_fmt(hidden.get('gap'))} | {_ci(hidden.get('ci'))} | | {ref.HIDDEN_SCORE_GAP} |",
            "", "Figure: [externalization](figures/fig3_externalization.html)."]


def _continuation_section(out: Path) -> list[str]:
    res = _load(out / "interventions" / "interventions.json")
    if res is None:
        return ["_not run_"]
    lines = ["| condition | mean score | 95% CI | n | parse failures | re-acquisition | reference study |",
             "|---|---|---|---|---|---|---|"]
    for name, row in intervention_conditions(res).items():
        lines.append(f"| {name} | {_fmt(row.get('mean'))} | {_ci(row.get('ci'))} | {row.get('n')} | "
                     f"{row.get('parse_failures')} | {_fmt(row.get('reacquisition_rate'))} | "
                     f"{ref.CONTINUATIONS.get(name, '')} |")
    return lines + ["", "Figure: [continuations](figures/fig4_interventions.html)."]


def write_report(out: Path, subsets: dict[str, str], timings: dict[str, float], settings: dict[str, Any]) -> Path:
    """Write ``out/report.md`` from the result files present; return its path."""
    out = Path(out)
    sections = [
        ("Future-necessity probe", _section(_probe_section, out)),
        ("KL Repair (activation patching)", _section(_repair_section, out)),
        ("ICLR block entropy", _section(_iclr_section, out)),
        ("Set-level deletion harm (DRSR)", _section(_harm_section, out)),
        ("State externalization", _section(_risk_section, out)),
        ("Controlled continuations", _section(_continuation_section, out)),
    ]
    lines = ["# Reasoning persistence: mechanistic analyses", "",
             f"Model `{settings.get('model')}`; full run: {settings.get('full')}. "
             "Reference-study numbers are from Qwen3.5-9B on the study's own trajectories; a 135M model on "
             "25 hand-written demo trajectories is not expected to reproduce them.", ""]
    if subsets:
        lines += ["## Subsets (run with `--full` for everything)", ""]
        lines += [f"- **{name}**: {what}" for name, what in subsets.items()] + [""]
    for title, body in sections:
        lines += [f"## {title}", "", *body, ""]
    lines += ["## Attention", "", "Boundary attention mass by segment kind: [figure](figures/fig5_attention.html), "
              "data in `attention/attention.json`.", ""]
    if timings:
        lines += ["## Stage timings (this run, seconds)", "", "| stage | s |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in timings.items()] + [""]
    path = out / "report.md"
    atomic_write_bytes(path, "\n".join(lines).encode())
    return path
