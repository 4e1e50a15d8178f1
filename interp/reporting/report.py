"""``report.md``: every headline number of a results directory beside the reference study's.

One section per analysis of the registry (``interp.reporting.analyses``), in its order: its figures, then the
lines its ``section`` builder makes from its result file, read with ``interp.reporting.figures.load_result``
(checked against the writer's ``FIELDS``); a file that does not match gives a section naming the file and field.
Reference values come only from ``interp.reporting.reference``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.io import atomic_write_bytes

from interp.reporting import reference as ref
from interp.reporting.analyses import ANALYSES, Analysis, resolve
from interp.reporting.drsr import drsr_section
from interp.reporting.numbers import ci_text, num, shown
from interp.reporting.ran import provenance_of, ran_line, setting
from interp.reporting.figures import load_result
from interp.reporting.figures.externalization import externalization_sections
from interp.reporting.figures.iclr import csv_bool
from interp.reporting.figures.interventions import intervention_conditions
from interp.schema import SchemaError

if TYPE_CHECKING:
    import pandas as pd


def _load(path: Path) -> Any:
    return load_result(path) if path.exists() else None


def _section(analysis: Analysis, out: Path) -> list[str]:
    """An analysis's section lines from its result file; "_not run_" without one, and one line naming the file and
    field when a result file does not match its schema."""
    path = out / analysis.path()
    if analysis.section is None:
        return []
    if not path.is_file():
        return ["_not run_"]
    try:
        result = load_result(path)
        return [*resolve(analysis.section)(result, path.parent), "", ran_line(result)]
    except SchemaError as exc:
        return [f"_not readable: {path}: {exc}_" if not str(exc).startswith(str(path)) else f"_not readable: {exc}_"]


def attention_section(res: dict[str, Any], folder: Path) -> list[str]:
    """Where the attention data is (the figure says the rest)."""
    return [f"Boundary attention by segment kind; data in `{folder.name}/attention.json`."]


def probe_section(res: dict[str, Any], folder: Path) -> list[str]:
    """The probe's gain over the position baseline, its permutation tests and estimates beside the reference."""
    chosen = ", ".join(f"L{f.get('layer')}/{f.get('pooling')}" for f in res.get("folds", []))
    gain, base, both = res.get("gain"), res.get("baseline"), res.get("probe_plus_baseline")
    if gain:
        lead = (f"**Gain of the hidden-state probe over the position baseline: {gain['auroc']:+.3f} AUROC "
                f"{shown(ci_text(gain.get('auroc_ci')))}** (AP {gain['ap']:+.3f} {shown(ci_text(gain.get('ap_ci')))}); the baseline is a "
                f"probe on {', '.join(res.get('nuisance_features', []))} through the same task-level nested CV, the "
                "CI a paired task bootstrap (both scored on the same resampled tasks). A CI that covers 0 means "
                "the hidden state adds nothing measurable beyond position.")
    else:
        lead = ("_No position baseline (the samples carry no position features): the AUROC below may be "
                "position alone._")
    p_line = "Permutation tests: not run."
    if res.get("permutation_p") is not None:
        fixed = res.get("permutation_position_fixed_tasks", 0)
        p_line = (f"Permutation tests of *{res.get('permutation_statistic')}* "
                  f"(`--permutation {res.get('config', {}).get('permutation', 'fixed')}`, "
                  f"{len(res.get('permutation_null', []))} permutations, smallest possible p "
                  f"{shown(num(res.get('permutation_p_min')))}): "
                  f"p = {shown(num(res['permutation_p']))} under the across-task null (destroys position structure), "
                  f"p = {shown(num(res.get('permutation_p_position')))} under the position-keeping null (whole label "
                  f"sequences swapped between tasks of equal length; {fixed} task(s) alone in their length keep "
                  "their labels).")
    rows: list[tuple[str, float, list[float] | None, float, list[float] | None, float, float | None]]
    rows = [("hidden-state probe (headline)", res["auroc"], res.get("auroc_ci"), res["ap"], res.get("ap_ci"),
             res["balanced_accuracy"], ref.PROBE["auroc"])]
    rows += [(name, e["auroc"], e.get("auroc_ci"), e["ap"], e.get("ap_ci"), e["balanced_accuracy"], None)
             for name, e in (("position baseline", base), ("probe + baseline", both)) if e]
    return [
        lead, "",
        f"n = {res['n_samples']} boundaries from {res['n_tasks']} tasks ({res['n_positive']} positive); "
        f"{res.get('n_excluded_final', 0)} final boundaries left out (no later step: target undefined); "
        f"control-task AUROC = {shown(num(res.get('control_auroc')))}.", "", p_line,
        "", "| estimate | AUROC | 95% CI (task bootstrap) | AP | 95% CI | balanced accuracy | reference study AUROC |",
        "|---|---|---|---|---|---|---|",
        *(f"| {name} | {shown(num(a))} | {shown(ci_text(aci))} | {shown(num(ap))} | {shown(ci_text(apci))} | {shown(num(bacc))} | "
          f"{'' if r is None else r} |" for name, a, aci, ap, apci, bacc, r in rows),
        "", f"Reference study: AP {ref.PROBE['ap']}, balanced accuracy {ref.PROBE['balanced_accuracy']} (no position "
        f"baseline reported). Layer/pooling chosen per outer fold: {chosen}. Reference setting: {ref.MODEL}, "
        f"{ref.PROBE['n_tasks']} tasks, {ref.PROBE['n_samples']} boundaries ({ref.PROBE['n_positive']} positive), "
        "task-level nested CV.",
    ]


def _noise_line(res: dict[str, Any]) -> str:
    """The measured noise of KL Repair (medians over boundaries, nats), both components, when the result has them."""
    def fmt(key: str) -> str:
        value = res.get(key)
        return "-" if value is None else f"{value:.3g}"
    if res.get("noise_median") is None:
        return ""
    return (f" Measured noise, median over boundaries: {fmt('noise_median')} nats (null patch "
            f"{fmt('noise_null_median')}, rescheduled P_full {fmt('noise_schedule_median')}; largest "
            f"{fmt('noise_max')}).")


def repair_section(res: dict[str, Any], folder: Path) -> list[str]:
    """KL Repair at a spread of sites (mean, CI, median, ratio of sums, top-1) beside the reference layers."""
    rule = res.get("exclusion_rule") or "the threshold"
    lines = [f"Condition `{res['condition']}`, {res['n_samples']} boundaries ({res['n_excluded']} excluded, kept "
             f"when {rule}), method `{res['method']}`, layers `{setting(res, 'layers')}`, model dtype "
             f"{provenance_of(res).get('dtype')}."
             + _noise_line(res)
             + (f" Formula bound (a sanity figure, not the rule): {res['d_threshold_rule']}."
                if res.get("d_threshold_rule") else ""),
             "Ratio of sums = 1 - sum KL(P_full||P_patch) / sum KL(P_full||P_del): boundaries weighted by their "
             "deletion effect, unlike the mean of per-boundary ratios.", "",
             "| site | Repair (mean) | 95% CI | median | ratio of sums | top-1 recovery |", "|---|---|---|---|---|---|"]
    n = len(res["sites"])
    picks = sorted({0, n // 4, n // 2, (3 * n) // 4, n - 2, n - 1} & set(range(n)))
    mean, top1 = res["repair_mean"] or [None] * n, res["top1_mean"] or [None] * n  # empty: no sample kept
    median, ratio = res.get("repair_median") or [None] * n, res.get("repair_ratio") or [None] * n
    ci = res["repair_ci"] or [None] * n
    for i in picks:
        lines.append(f"| {res['sites'][i]} | {shown(num(mean[i]))} | {shown(ci_text(ci[i]))} | "
                     f"{shown(num(median[i]))} | {shown(num(ratio[i]))} | {shown(num(top1[i]))} |")
    points = ", ".join(f"layer {k}: {v}" for k, v in ref.KL_REPAIR.items())
    return lines + ["", f"Reference study ({ref.MODEL}): {points}."]


def attribution_section(res: dict[str, Any], folder: Path) -> list[str]:
    """First order beside exact: pooled and per-boundary agreement, the tail Repair at a spread of sites, the
    sites where the two disagree most, and the forwards each needs."""
    agree, per = res["agreement"], res["per_boundary_spearman"]
    fw = res["forwards"]
    lines = [f"Condition `{res['condition']}`, {len(res['boundaries'])} boundaries ({len(res['skipped'])} skipped), "
             f"{setting(res, 'exact_sites')} history sites per boundary patched exactly. Forwards per boundary: "
             f"attribution {shown(num(fw['attribution']))} (plus one backward per map), exact for the same map "
             f"{shown(num(fw['exact']))}.", "",
             "| compared | pairs | Spearman (pooled) | median per-boundary Spearman | MAE | largest error |",
             "|---|---|---|---|---|---|"]
    for part, name in (("tail", "boundary tail vs exact KL Repair (nats)"),
                       ("history", "history sites vs their exact patch (nats)"),
                       ("harm", "singleton harm vs exact DRSR harm (nats/token)")):
        a = agree[part]
        errors = ["n/a" if v is None else f"{v:.2g}" for v in (a["mae"], a["max_abs_error"])]  # nats: small
        lines.append(f"| {name} | {a['n']} | {shown(num(a['spearman']))} | {shown(num(per[part]))} | "
                     f"{errors[0]} | {errors[1]} |")
    rows = res["boundaries"]
    n = len(res["sites"])
    lines += ["", "| site | Repair, first order (mean) | Repair, exact (mean) |", "|---|---|---|"]
    for i in sorted({0, n // 4, n // 2, (3 * n) // 4, n - 1} & set(range(n))):
        lin = [r["repair_linear"][i] for r in rows if r["repair_linear"][i] is not None]
        ex = [r["repair_exact"][i] for r in rows if r["repair_exact"][i] is not None]
        lines.append(f"| {res['sites'][i]} | {shown(num(sum(lin) / len(lin) if lin else None))} | "
                     f"{shown(num(sum(ex) / len(ex) if ex else None))} |")
    worst = agree["tail"]["disagree"][:3] + agree["harm"]["disagree"][:3]
    if worst:
        lines += ["", "Largest disagreements: " + "; ".join(
            f"{w['site']} first order {w['estimate']:.3g} vs exact {w['exact']:.3g}" for w in worst) + "."]
    return lines + ["", "The first-order KL change of a site that carries the whole deletion's effect is about twice "
                    "the exact one (KL is quadratic at its minimum), so read Repair levels from the exact column and "
                    "the ranking from the first order."]


def iclr_section(frame: pd.DataFrame, folder: Path) -> list[str]:
    """ICLR's drop statistics at the recorded rho (tokens and blocks dropped, steps not scored over the recorded
    token limit, online vs full context)."""
    rho, limit = setting(frame, "rho"), setting(frame, "max_tokens")
    frame = frame.assign(scored=csv_bool(frame["scored"]), dropped=csv_bool(frame["dropped"]))
    dropped = frame[frame["dropped"]]
    steps = frame.groupby(["task_id", "step"], sort=False).agg(
        n=("block", "size"), scored=("scored", "all"), drops=("dropped", "sum"), input_tokens=("input_tokens", "max"))
    multi = steps[steps["n"] > 1]
    skipped = steps[~steps["scored"]]
    context = ", ".join(sorted(set(frame["context"].astype(str))))
    lines = [f"Scorer context: **{context}** (online = the study's method: step t scored on the history with steps "
             f"1..t-1 already compressed). {len(frame)} reasoning blocks in {len(steps)} steps; mean entropy "
             f"{frame['mean_entropy_bits'].mean():.3f} bits/token (sd {frame['mean_entropy_bits'].std():.3f}).", "",
             f"| ICLR statistic (rho = {rho}) | value |", "|---|---|",
             f"| reasoning tokens removed | {int(dropped['n_tokens'].sum())} of {int(frame['n_tokens'].sum())} "
             f"({dropped['n_tokens'].sum() / max(frame['n_tokens'].sum(), 1):.1%}) |",
             f"| blocks dropped | {len(dropped)} of {len(frame)} ({len(dropped) / max(len(frame), 1):.1%}) |",
             f"| blocks dropped per step (steps with > 1 block) | mean {multi['drops'].mean():.2f}, "
             f"max {int(multi['drops'].max()) if len(multi) else 0} over {len(multi)} steps |",
             f"| steps not scored (input over the {limit}-token limit; left whole) | {len(skipped)}"
             + (f", inputs {int(skipped['input_tokens'].min())}..{int(skipped['input_tokens'].max())} tokens"
                if len(skipped) and skipped["input_tokens"].notna().all() else "") + " |"]
    if "dropped_full" in frame and frame["dropped_full"].notna().any():
        both = frame[frame["scored"] & frame["dropped_full"].notna()]
        full = csv_bool(both["dropped_full"])
        agree = (both["dropped"] == full)
        per_step = both.assign(differ=~agree).groupby(["task_id", "step"])["differ"].any()
        per_step = per_step[steps.loc[per_step.index, "n"] > 1]
        lines += [f"| online vs full-context drop decisions: blocks agreeing | {int(agree.sum())} of {len(both)} "
                  f"({agree.mean():.1%}) |",
                  f"| online vs full-context: steps (> 1 block) whose drop set differs | {int(per_step.sum())} of "
                  f"{len(per_step)} |"]
    return lines


def harm_section(res: dict[str, Any], folder: Path) -> list[str]:
    """Set-level harm: mean interaction per set size, and each aggregator's pair-ordering accuracy and MAE."""
    tokens = [b["target_tokens"] for b in res["boundaries"]]
    lines = [f"{len(res['boundaries'])} boundaries; units: {', '.join(res['units']) or '-'}; set sizes "
             f"{', '.join(map(str, res['cardinalities'])) or '-'}; recorded next output: "
             f"{min(tokens, default=0)}-{max(tokens, default=0)} tokens. Pairs of sets whose exact harms differ by "
             f"less than {shown(num(setting(res, 'margin')))} nats/token are not counted; sets up to "
             f"{setting(res, 'max_k')} units, {setting(res, 'budget')} sampled per size.", "",
             "| set size | mean interaction (nats/token) | sets | MAE, singletons + pairwise interactions (triples) |",
             "|---|---|---|---|"]
    for k, row in res["per_cardinality"].items():
        lines.append(f"| {k} | {shown(num(row['mean_interaction']))} | {row['n_sets']} | "
                     f"{shown(num(row['mae_pairwise'])) if row['n_pairwise'] else ''} |")
    lines += ["", "| aggregator of singleton harms | set size | sets | pairs counted (tasks) | pair-ordering accuracy | "
              "95% CI (task bootstrap) | MAE (nats/token) |", "|---|---|---|---|---|---|---|"]
    for row in res["aggregates"]:
        lines.append(f"| {row['aggregator']} | {row['cardinality']} | {row['n_sets']} | {row['n_pairs']} "
                     f"({row.get('n_tasks', '?')}) | {shown(num(row['pair_accuracy']))} | {shown(ci_text(row.get('ci')))} | "
                     f"{shown(num(row['mae']))} |")
    apart = res.get("step_sets")
    if apart:
        every = next((r for r in apart["aggregates"] if (r["aggregator"], r["cardinality"]) == ("sum", "all")), None)
        lines += ["", f"These rows, compared with DRSR's Tables 1 and 2, hold sets of DRSR's block kinds only. "
                  f"{apart['n_sets']} sets of 2+ units hold a whole step (the toolkit's granularity addition) and "
                  f"are reported apart (harm.json step_sets): with them, the sum aggregator's pair-ordering "
                  f"accuracy over every size is {shown(num(every['pair_accuracy'] if every else None))} "
                  f"({every['n_pairs'] if every else 0} pairs)."]
    return lines


def drsr_report_section(res: dict[str, Any], folder: Path) -> list[str]:
    """DRSR's appendix section (``interp.reporting.drsr``)."""
    return drsr_section(res)


def risk_section(res: dict[str, Any], folder: Path) -> list[str]:
    """The G labeler's agreement (in-sample, held out) and future risk by G beside the reference."""
    sec = externalization_sections(res)
    risk, within = sec.get("risk", {}), sec.get("within_task", {})
    g1, g0 = risk.get("G1", {}), risk.get("G0", {})
    labels = _load(folder / "externalization_labels.json") or {}
    agree = labels.get("agreement") or {}
    scope = (labels.get("config") or {}).get("scope")
    kappa = (f"Rule-based G labeler (scope {scope}: {labels.get('scope_note')}; carriers "
             f"{', '.join((labels.get('config') or {}).get('carriers') or [])}) vs hand annotations, in-sample: "
             f"Cohen's kappa {agree.get('kappa')}, accuracy {agree.get('accuracy')}, n = {agree.get('n')}, "
             f"confusion {agree.get('confusion')}. The risk below uses the annotations' G and y."
             if agree.get("n") else "")
    held = []
    for name, report in (labels.get("held_out") or {}).items():
        h, d = report["held_out"], report.get("default_held_out") or {}
        held.append(f"| {name} | {h.get('kappa')} | {shown(ci_text(h.get('kappa_ci')))} | {h.get('n')} boundaries, "
                    f"{len(report['eval_tasks'])} tasks | {len(report['tune_tasks'])} tasks | {_tuned(report)} | "
                    f"{d.get('kappa')} {shown(ci_text(d.get('kappa_ci')))} |")
    if held:
        held = ["", "Held-out agreement: thresholds tuned on some tasks, kappa on the other (disjoint) tasks, "
                "95% task-bootstrap CI.", "",
                "| rule labeler | held-out kappa | 95% CI | evaluated on | tuned on | chosen config | "
                "shipped config, held-out kappa |", "|---|---|---|---|---|---|---|", *held]
    return [kappa, *held, "", "| quantity | this run | 95% CI | n | reference study |", "|---|---|---|---|---|",
            f"| P(y=1 given G=1) | {shown(num(g1.get('p')))} | {shown(ci_text(g1.get('ci')))} | {g1.get('n')} | {ref.RISK['G1']} |",
            f"| P(y=1 given G=0) | {shown(num(g0.get('p')))} | {shown(ci_text(g0.get('ci')))} | {g0.get('n')} | {ref.RISK['G0']} |",
            f"| within-task gap | {shown(num(within.get('gap')))} | {shown(ci_text(within.get('ci')))} | {within.get('n_tasks')} tasks | "
            f"{ref.WITHIN_TASK_GAP} |",
            *_hidden_rows(res)]


def _hidden_rows(res: dict[str, Any]) -> list[str]:
    """The probe-score gap rows: log-odds without a reference, probability beside the reference (its units)."""
    gap = res.get("hidden_score_gap") or {}
    rows = []
    for units, reference in (("log-odds", ""), ("probability", ref.HIDDEN_SCORE_GAP)):
        entry = gap.get(units.replace("-", "")) or {}
        if entry.get("estimate") is not None:
            rows.append(f"| hidden-score gap ({units}) | {shown(num(entry['estimate']))} | {shown(ci_text(entry.get('ci')))} | "
                        f"{entry.get('n_tasks')} tasks | {reference} |")
    return rows


def _tuned(report: dict[str, Any]) -> str:
    """The chosen config of a held-out report, only the settings its grid varies."""
    chosen, grid = report["chosen"], [g["config"] for g in report["grid"]]
    if not isinstance(chosen, dict) or not all(isinstance(g, dict) for g in grid):
        return str(chosen)
    return ", ".join(f"{k}={chosen[k]}" for k in chosen if len({repr(g.get(k)) for g in grid}) > 1)


def continuation_section(res: dict[str, Any], folder: Path) -> list[str]:
    """Mean continuation score per history condition, truncated turns and re-acquisition beside the reference."""
    settings = res.get("settings") or {}
    lines = [f"{res.get('what', '')} Token limit {settings.get('max_new_tokens')} "
             f"({settings.get('max_new_tokens_source', 'given')}); each turn stops at the end of its first action; "
             "turns cut off by the limit are counted as truncated, not scored.", "",
             "| condition | mean score | 95% CI | n | truncated | parse failures | re-acquisition | reference study |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in intervention_conditions(res).items():
        lines.append(f"| {name} | {shown(num(row.get('mean')))} | {shown(ci_text(row.get('ci')))} | {row.get('n')} | "
                     f"{row.get('truncated', 0)} of {row.get('n_generations')} | "
                     f"{row.get('parse_failures')} | {shown(num(row.get('reacquisition_rate')))} | "
                     f"{ref.CONTINUATIONS.get(name, '')} |")
    return lines


def _pictures(out: Path, names: tuple[str, ...]) -> list[str]:
    """Each figure as an embedded PNG (relative link) with its interactive HTML linked below; nothing when absent."""
    lines = []
    for name in names:
        png, html = out / "figures" / f"{name}.png", out / "figures" / f"{name}.html"
        if png.is_file():
            lines += [f"![{name}](figures/{name}.png)", ""]
        if html.is_file():
            lines += [f"[{name}: interactive HTML](figures/{name}.html)" + ("" if png.is_file() else
                      " (no PNG: see the figures step's message)"), ""]
    return lines


def write_report(out: Path, subsets: dict[str, str], timings: dict[str, float], settings: dict[str, Any]) -> Path:
    """Write ``out/report.md`` from the result files present; return its path."""
    out = Path(out)
    lines = ["# Reasoning persistence: mechanistic analyses", ""]  # opens with the first section's picture
    for analysis in ANALYSES:  # the registry's order
        lines += [f"## {analysis.title}", "", *_pictures(out, tuple(f.name for f in analysis.figures)),
                  *_section(analysis, out), ""]
    lines += ["## About this run", "",
              f"Model `{settings.get('model')}`; full run: {settings.get('full')}. "
              "Reference-study numbers are from Qwen3.5-9B on the study's own trajectories; a 135M model on "
              "the bundled hand-written demo trajectories (25, or the subset below) is not expected to reproduce them.",
              ""]
    if subsets:
        lines += ["Subsets (run with `--full` for everything):", ""]
        lines += [f"- **{name}**: {what}" for name, what in subsets.items()] + [""]
    if timings:
        lines += ["## Stage timings (this run, seconds)", "", "| stage | s |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in timings.items()] + [""]
    path = out / "report.md"
    atomic_write_bytes(path, "\n".join(lines).encode())
    return path
