"""Headline numbers of each analysis beside the reference study's, as Markdown and LaTeX tables.

``write_tables(results_dir)`` reads the result files that exist (the same
ones ``interp.reporting.figures`` reads, checked by its ``load_result``
against the writers' ``FIELDS``) and writes ``tables/<name>.md`` and
``tables/<name>.tex`` for each table of the registry
(``interp.reporting.analyses``: probe, kl_repair, harm, externalization,
interventions). Cells are preformatted strings; a missing value is "—" in
Markdown and "---" in LaTeX. Probabilities are shown in %, gaps in
percentage points (pp), Repair and AUROC unitless.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from interp.reporting import reference
from interp.reporting.analyses import ANALYSES, resolve
from interp.reporting.numbers import ci_text as _ci
from interp.reporting.numbers import num as _num
from interp.reporting.numbers import pct as _pct
from interp.reporting.ran import setting
from interp.reporting.figures import load_result
from interp.reporting.figures.externalization import externalization_sections
from interp.reporting.figures.interventions import intervention_conditions
from interp.io import atomic_write_bytes
from interp.schema import SchemaError

REFERENCE = f"reference study ({reference.MODEL})"


def probe_table(result: dict) -> pd.DataFrame:
    """Gain over the position baseline first, then AUROCs, AP (task-bootstrap CIs), balanced accuracy, counts, p."""
    ref = reference.PROBE
    gain, base, both = result.get("gain"), result.get("baseline"), result.get("probe_plus_baseline")
    rows: list[tuple[str, str | None, str | None, str | None]] = []
    if gain:
        rows.append(("AUROC gain over position baseline", _signed(gain["auroc"]), _ci(gain.get("auroc_ci")), None))
    rows.append(("AUROC", _num(result["auroc"]), _ci(result.get("auroc_ci")), _num(ref["auroc"])))
    rows += [(name, _num(estimate["auroc"]), _ci(estimate.get("auroc_ci")), None)
             for name, estimate in (("AUROC, position baseline", base), ("AUROC, probe + baseline", both)) if estimate]
    rows += [
        ("average precision", _num(result.get("ap")), _ci(result.get("ap_ci")), _num(ref["ap"])),
        ("balanced accuracy", _num(result.get("balanced_accuracy")), None, _num(ref["balanced_accuracy"])),
        ("boundaries (positive)", f"{result.get('n_samples', '?')} ({result.get('n_positive', '?')})", None,
         f"{ref['n_samples']} ({ref['n_positive']})"),
        ("tasks", str(result.get("n_tasks", "?")), None, str(ref["n_tasks"])),
    ]
    if result.get("n_excluded_final"):
        rows.append(("final boundaries left out (undefined target)", str(result["n_excluded_final"]), None, None))
    how = (result.get("config") or {}).get("permutation", "fixed")
    if result.get("permutation_p") is not None:
        rows.append((f"permutation p, across-task null ({how})", f"{result['permutation_p']:.3g}", None, None))
    if result.get("permutation_p_position") is not None:
        rows.append((f"permutation p, position-keeping null ({how})", f"{result['permutation_p_position']:.3g}",
                     None, None))
    return pd.DataFrame(rows, columns=["quantity", "ours", "95% CI", REFERENCE])


def _signed(value: float | None) -> str | None:
    """value with three decimals and an explicit sign (a gain)."""
    text = _num(value)
    return None if value is None or text is None else ("+" if value >= 0 else "") + text


def kl_repair_table(result: dict) -> pd.DataFrame:
    """Repair (mean, median, ratio of sums) and top-1 at the sites nearest the reference study's layers, and the final site."""
    sites, layers = result["sites"], result["layers"]
    n_layers = (result.get("model") or {}).get("n_layers") or max(layers) + 1
    resid = [i for i, site in enumerate(sites) if site.startswith("resid_pre")] or list(range(len(sites)))
    chosen: dict[int, str | None] = {}
    for ref_layer, value in reference.KL_REPAIR.items():
        target = ref_layer / (reference.N_LAYERS - 1) * (n_layers - 1)
        i = min(resid, key=lambda j: abs(layers[j] - target))
        chosen.setdefault(i, f"{value:.3f} (layer {ref_layer})")
    chosen.update({i: None for i, site in enumerate(sites) if site.startswith("resid_post") and i not in chosen})
    ci = result.get("repair_ci") or [None] * len(sites)
    top1 = result.get("top1_mean") or [None] * len(sites)
    # resid_post.l after resid_pre.l: it is the output of layer l
    order = sorted(chosen, key=lambda i: (layers[i], sites[i].startswith("resid_post")))
    mean = result["repair_mean"] or [None] * len(sites)  # empty when no sample was kept
    median = result.get("repair_median") or [None] * len(sites)
    ratio = result.get("repair_ratio") or [None] * len(sites)  # 1 - sum KL_patch / sum d
    rows = [(sites[i], str(layers[i]), _num(mean[i]), _ci(ci[i]), _num(median[i]), _num(ratio[i]), _num(top1[i]),
             chosen[i]) for i in order]
    return pd.DataFrame(rows, columns=["site", "layer", "Repair (mean)", "95% CI", "median", "ratio of sums",
                                       "top-1 recovery", REFERENCE])


def externalization_table(result: dict) -> pd.DataFrame:
    """Future behavioural risk by G, the within-task gap and the hidden-score gap (log-odds and probability)."""
    sections = externalization_sections(result)
    rows = [(f"risk, G = {g[1]}", _pct(entry["p"]), _ci(entry.get("ci"), 100, "%"), str(entry.get("n", "?")),
             _pct(reference.RISK[g])) for g in ("G1", "G0") if (entry := sections.get("risk", {}).get(g))]
    if within := sections.get("within_task"):
        rows.append(("within-task gap", f"{100 * within['gap']:.1f} pp", _ci(within.get("ci"), 100, " pp"),
                     f"{within.get('n_tasks', '?')} tasks", f"{100 * reference.WITHIN_TASK_GAP:.1f} pp"))
    logodds = (result.get("hidden_score_gap") or {}).get("logodds") or {}
    if logodds.get("estimate") is not None:  # the reference value is a probability difference: not beside log-odds
        rows.append(("hidden-score gap (log-odds)", _num(logodds["estimate"]), _ci(logodds.get("ci")),
                     f"{logodds.get('n_tasks')} tasks", None))
    probability = (result.get("hidden_score_gap") or {}).get("probability") or {}
    if probability.get("estimate") is not None:
        rows.append(("hidden-score gap (probability)", _num(probability["estimate"]), _ci(probability.get("ci")),
                     f"{probability.get('n_tasks')} tasks", _num(reference.HIDDEN_SCORE_GAP)))
    if not rows:
        raise ValueError("no risk, within-task or hidden-score data (see interp.reporting.figures.externalization)")
    return pd.DataFrame(rows, columns=["quantity", "ours", "95% CI", "n", REFERENCE])


def interventions_table(result: dict) -> pd.DataFrame:
    """Mean continuation score per history condition with CI, n, truncated turns, parse failures, re-acquisition."""
    rows = [(name, _num(c["mean"]), _ci(c.get("ci")), str(c.get("n", "?")), str(c.get("truncated", 0)),
             str(c.get("parse_failures", "?")), _pct(c.get("reacquisition_rate")),
             _num(reference.CONTINUATIONS.get(name)))
            for name, c in intervention_conditions(result).items()]
    if not rows:
        raise ValueError("no condition with a score or a truncated generation in 'summary'")
    return pd.DataFrame(rows, columns=["condition", "score", "95% CI", "n", "truncated", "parse failures",
                                       "re-acquisition", REFERENCE])


def harm_table(result: dict) -> pd.DataFrame:
    """Per aggregator of singleton harms and set size: pair-ordering accuracy at the margin (task-bootstrap CI),
    pairs counted, MAE."""
    rows: list[tuple[str, object, str, str | None, str | None, str | None, str | None]]
    rows = [(row["aggregator"], row["cardinality"], str(row["n_sets"]), str(row["n_pairs"]),
             _num(row["pair_accuracy"]), _ci(row.get("ci")), _num(row["mae"], 4)) for row in result["aggregates"]]
    rows += [("sum + pairwise interactions", k, str(entry["n_pairwise"]), None, None, None,
              _num(entry["mae_pairwise"], 4))
             for k, entry in result["per_cardinality"].items() if entry.get("n_pairwise")]
    if not rows:
        raise ValueError("no set of two or more units in 'aggregates'")
    return pd.DataFrame(rows, columns=["aggregator", "set size", "sets", f"pairs (margin {setting(result, 'margin')})",
                                       "pair-ordering accuracy", "95% CI", "MAE (nats/token)"])


def write_tables(results_dir: Path) -> list[Path]:
    """Write tables/<name>.md and .tex for every analysis whose result file exists; return the paths written."""
    results_dir = Path(results_dir)
    out_dir = results_dir / "tables"
    written: list[Path] = []
    failed = []
    for analysis, table in ((a, t) for a in ANALYSES for t in a.tables):
        name, caption, path = table.name, table.caption, results_dir / analysis.path(table.file)
        if not path.is_file():  # that analysis did not run
            continue
        try:
            frame = resolve(table.build)(load_result(path))
        except SchemaError as exc:  # names the file and the field
            failed.append(str(exc))
            continue
        except KeyError as exc:
            failed.append(f"{path}: missing field {exc}")
            continue
        except (ValueError, TypeError, IndexError) as exc:  # the readers' own messages already name the file
            failed.append(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}")
            continue
        for suffix, text in ((".md", to_markdown(frame, caption)), (".tex", to_latex(frame, caption, name))):
            atomic_write_bytes(out_dir / f"{name}{suffix}", text.encode("utf-8"))
            written.append(out_dir / f"{name}{suffix}")
    if failed:
        raise ValueError("tables not written: " + "; ".join(failed))
    return written


def to_markdown(frame: pd.DataFrame, caption: str) -> str:
    """A GitHub-flavoured Markdown table (first column left-aligned, the rest right) under a caption line."""
    def cell(value: object) -> str:
        return "—" if pd.isna(value) else str(value).replace("|", "\\|")

    lines = [f"**{caption}**", "", "| " + " | ".join(map(cell, frame.columns)) + " |",
             "|" + "|".join([" :--- "] + [" ---: "] * (frame.shape[1] - 1)) + "|"]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def to_latex(frame: pd.DataFrame, caption: str, name: str) -> str:
    """A booktabs LaTeX table with caption and label tab:<name>; special characters escaped."""
    caption = caption.replace("%", r"\%")  # the cells are escaped by pandas, the caption is not
    return frame.to_latex(index=False, escape=True, na_rep="---", caption=caption, label=f"tab:{name}",
                          column_format="l" + "r" * (frame.shape[1] - 1), position="t")
