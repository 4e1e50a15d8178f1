"""DRSR's set-risk gate from ``gate.json`` (``patching.gate_eval``): unsafe-score distributions of calibration
(out-of-fold) and test sets (DRSR Fig 7), the risk-gate operating curve against tau (Fig 8), coverage / saving / unsafe rate across
beta (Fig 9), and the report's section (prediction, pair ordering, the gate, the ablations, the reference beside
ours). Titles describe; they draw no conclusion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting import reference as ref
from interp.reporting.numbers import ci_text, num, shown
from interp.reporting.figures.theme import BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE, titled


def _where(result: dict) -> str:
    split = result["split"]
    model = (result.get("model") or {}).get("spec", "?")
    return (f"train / validation / test: {len(split['train']['tasks'])} / {len(split['validation']['tasks'])} / "
            f"{len(split['test']['tasks'])} trajectories, model {model}")


def scores_figure(result: dict) -> go.Figure:
    """Unsafe scores of the valid candidate sets of calibration (a, out-of-fold) and test (b), by exact label."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("a  calibration sets (out-of-fold)", "b  test sets (held out)"))
    for col, part in enumerate(("calibration", "test"), start=1):
        sc = result["scores"][part]
        for label, color, name in ((False, PALETTE[0], "safe (exact harm at most the threshold)"),
                                   (True, PALETTE[3], "unsafe (exact harm above the threshold)")):
            xs = [s for s, u in zip(sc["score"], sc["unsafe"]) if u == label]
            fig.add_trace(go.Histogram(x=xs, name=name, marker_color=color, opacity=0.65, nbinsx=30,
                                       legendgroup=name, showlegend=col == 1, xbins=dict(start=0, end=1, size=1 / 30)),
                          1, col)
        tau = result["selected"]["tau"]
        if tau is not None:
            fig.add_vline(x=tau, line=dict(color=GREY, dash="dot"), row=1, col=col)
        fig.update_xaxes(title_text="unsafe score (+ beta x uncertainty)", range=[0, 1], row=1, col=col)
    fig.update_yaxes(title_text="candidate sets", row=1, col=1)
    fig.update_layout(template=TEMPLATE, barmode="overlay", height=520, legend=BOTTOM_LEGEND, margin=dict(b=140))
    sel = result["selected"]
    titled(fig, "Unsafe scores of candidate deletion sets by exact label", [
        f"selected tau {shown(num(sel['tau'], 4))} (dotted; null: abstain), K {sel['k']}, beta {sel['beta']} "
        f"(DRSR: K {ref.DRSR_GATE['k']}, beta {ref.DRSR_GATE['beta']}; DRSR's tau {ref.DRSR_GATE['tau']} is on its "
        "set model's scale, not this axis)",
        f"unsafe: exact harm above {result['settings']['unsafe_threshold']} nats/token", _where(result)])
    return fig


def operating_curve_figure(result: dict) -> go.Figure:
    """Empirical unsafe rate (a) and mean direct removal with coverage (b) of the gate on test against tau."""
    curve = result["operating_curve"]
    if not curve:
        raise ValueError("gate.json: no operating curve (no valid candidate set in validation or test)")
    taus = [c["tau"] for c in curve]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "a  empirical unsafe rate of the measured deletions", "b  mean direct removal and coverage"))
    fig.add_trace(go.Scatter(x=taus, y=[c["unsafe_rate"] for c in curve], mode="lines+markers", name="unsafe rate",
                             line=dict(color=PALETTE[3])), 1, 1)
    # what the rate rests on: the share of test boundaries whose deletion was measured (none: the rate is undefined)
    fig.add_trace(go.Scatter(x=taus, y=[c["coverage"] * c["n_measured"] / c["n_deleted"] if c["n_deleted"] else 0.0
                                        for c in curve], mode="lines", name="boundaries with a measured deletion",
                             line=dict(color=GREY, dash="dash")), 1, 1)
    fig.add_hline(y=result["settings"]["max_unsafe_rate"], line=dict(color=GREY, dash="dot"), row=1, col=1)
    fig.add_trace(go.Scatter(x=taus, y=[c["removal"] for c in curve], mode="lines+markers",
                             name="mean direct removal (fraction of request tokens)", line=dict(color=PALETTE[0])),
                  1, 2)
    fig.add_trace(go.Scatter(x=taus, y=[c["coverage"] for c in curve], mode="lines", name="coverage (boundaries "
                             "deleting)", line=dict(color=PALETTE[2], dash="dash")), 1, 2)
    tau = result["selected"]["tau"]
    for col in (1, 2):
        if tau is not None:
            fig.add_vline(x=tau, line=dict(color=GREY, dash="dot"), row=1, col=col)
        fig.update_xaxes(title_text="risk threshold tau", row=1, col=col)
    fig.update_yaxes(title_text="fraction (of measured deletions; of boundaries)", row=1, col=1)
    fig.update_yaxes(title_text="fraction", row=1, col=2)
    fig.update_layout(template=TEMPLATE, height=540, legend=BOTTOM_LEGEND, margin=dict(b=150))
    titled(fig, "Risk-gate operating curve on the held-out trajectories", [
        f"K {result['selected']['k']}, beta {result['selected']['beta']}; dotted: selected tau and the "
        f"{result['settings']['max_unsafe_rate']:.3f} unsafe-rate limit; removal cap "
        f"{result['settings']['max_removal']:.0%}", _where(result)])
    return fig


def beta_figure(result: dict) -> go.Figure:
    """Coverage, mean direct removal and empirical unsafe rate on test for each beta (tau selected on calibration
    by the empirical rule)."""
    rows = result["beta_sweep"]
    betas = [str(r["beta"]) for r in rows]
    fig = go.Figure()
    for i, (key, name) in enumerate((("coverage", "coverage"), ("removal", "mean direct removal"),
                                     ("unsafe_rate", "empirical unsafe rate"))):
        fig.add_trace(go.Bar(x=betas, y=[r[key] for r in rows], name=name, marker_color=PALETTE[[2, 0, 3][i]]))
    fig.add_hline(y=result["settings"]["max_unsafe_rate"], line=dict(color=GREY, dash="dot"))
    fig.update_xaxes(title_text="uncertainty coefficient beta", type="category")
    fig.update_yaxes(title_text="fraction (test trajectories)")
    fig.update_layout(template=TEMPLATE, barmode="group", height=520, legend=BOTTOM_LEGEND, margin=dict(b=140))
    titled(fig, "Gate coverage, saving and unsafe rate across beta", [
        f"tau per beta selected on calibration (empirical rule) at K {result['selected']['k']}; dotted: the unsafe-rate limit; "
        f"reference frozen beta {ref.DRSR_GATE['beta']}", _where(result)])
    return fig


def _ci(ci: Any) -> str:
    """A CI as the report writes it after a number (one formatter: ``interp.reporting.numbers.ci_text``)."""
    text = ci_text(ci)
    return f" {text}" if text else ""


def calibration_lines(result: dict) -> list[str]:
    """The report's lines on how the gate was calibrated: the split rule, both rules' settings, and whether it
    deletes or abstains for lack of data (how many calibration boundaries are missing) or of a safe setting."""
    c = result["calibration"]
    lines = [f"Calibration: {c['split_rule']}; {c['n_folds']} folds, {c['n_boundaries']} calibration boundaries "
             f"with a measured set ({c['n_sets']} sets, {c['n_unsafe']} unsafe). Rule used: {c['rule']} (alpha "
             f"{c['alpha']}, delta {c['delta']}).", "",
             "| rule | K | beta | tau | boundaries needed | calibration coverage | calibration unsafe rate | test "
             "coverage | test unsafe rate |", "|---|---|---|---|---|---|---|---|---|"]
    for rule, r in c["rules"].items():
        cal, test = r["calibration"], r.get("test") or {}
        lines.append(f"| {rule} | {r['k']} | {r['beta']} | {shown(num(r['tau'], 4))} | {r['needed_boundaries']} | "
                     f"{shown(num(cal['coverage']))} | {shown(num(cal['unsafe_rate']))} | "
                     f"{shown(num(test.get('coverage')))} | {shown(num(test.get('unsafe_rate')))} |")
    if c["abstain"] == "data":
        verdict = (f"The gate abstains for lack of calibration data: an admissible setting under the {c['rule']} "
                   f"rule needs at least {c['needed_boundaries']} calibration boundaries; this run has "
                   f"{c['n_boundaries']}, {c['missing_boundaries']} missing.")
    elif c["abstain"] == "no_safe_setting":
        verdict = (f"The gate abstains for lack of a safe setting: {c['n_boundaries']} calibration boundaries "
                   f"(enough: {c['needed_boundaries']}) admitted none.")
    else:
        verdict = f"The gate deletes: tau {shown(num(result['selected']['tau'], 4))} under the {c['rule']} rule."
    return [*lines, "", verdict]


def gate_section(result: dict, folder: Path | None = None) -> list[str]:
    """The report's lines for gate.json: the split, calibration, prediction, pair ordering, the gate and the
    ablations."""
    r = ref.DRSR_GATE
    sel, pred, g = result["selected"], result["prediction"], result["gate"]
    split = result["split"]
    lines = [f"Scorer trained on {len(split['train']['tasks'])} + {len(split['validation']['tasks'])} train and "
             f"validation trajectories ({split['train']['n_sets'] + split['validation']['n_sets']} sets), "
             f"evaluated on {len(split['test']['tasks'])} held-out trajectories ({split['test']['n_sets']} sets); "
             f"unsafe: exact harm above {result['settings']['unsafe_threshold']} nats/token. Selected: K {sel['k']}, "
             f"beta {sel['beta']}, tau {shown(num(sel['tau'], 4))} on this scorer's scale (reference: K {r['k']}, "
             f"beta {r['beta']}); constraints unsafe rate <= {result['settings']['max_unsafe_rate']}, mean harm <= "
             f"{r['max_mean_harm']}, removal cap {r['max_removal']:.0%}.", "",
             *calibration_lines(result), "",
             f"Departures: {ref.DEPARTURES['scorer']} (DRSR's tau {r['tau']} on its own scale). "
             f"{ref.DEPARTURES['set_model']}. {ref.DEPARTURES['smoothing']}. {ref.DEPARTURES['calibration']}. "
             f"{ref.DEPARTURES['unsafe_threshold']}.", "",
             f"Predicted vs exact harm on test: MAE {shown(num(pred['mae'], 4))}{_ci(pred['mae_ci'])} nats/token, "
             f"Spearman {shown(num(pred['spearman']))}{_ci(pred['spearman_ci'])} ({pred['n_sets']} sets).", "",
             "| pair ordering at the margin (test, sets of 2+ units) | accuracy | 95% CI | pairs | reference |",
             "|---|---|---|---|---|"]
    for row in result["pair_ordering"]:
        theirs = ref.DRSR_PAIR_ACCURACY.get(row["method"])
        lines.append(f"| {row['method']} | {shown(num(row['pair_accuracy']))} | {_ci(row['ci']).strip() or '-'} | "
                     f"{row['n_pairs']} | {theirs if theirs is not None else '-'} |")
    lines += ["", "| gate on test | coverage | mean direct removal | unsafe rate | mean harm | K | beta | tau |",
              "|---|---|---|---|---|---|---|---|"]
    for row in result["ablations"]:
        lines.append(f"| {row['name']} | {shown(num(row['coverage']))} | {shown(num(row['removal']))} | "
                     f"{shown(num(row['unsafe_rate']))} | {shown(num(row['mean_harm'], 4))} | {row['k']} | {row['beta']} | "
                     f"{shown(num(row['tau'], 4))} |")
    lines += ["", f"The selected gate on test: coverage {shown(num(g['coverage']))}{_ci(g['ci']['coverage'])}, removal "
                  f"{shown(num(g['removal']))}{_ci(g['ci']['removal'])}, unsafe rate {shown(num(g['unsafe_rate']))}"
                  f"{_ci(g['ci']['unsafe_rate'])} ({g['n_deleted']} deletions at {g['n_boundaries']} boundaries)."]
    lines += [f"- _{n}_" for n in result.get("notes", [])]
    return lines
