"""Figure 4: controlled continuations under edited histories, from interventions.json."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting import reference
from interp.reporting.figures.theme import (BOTTOM_LEGEND, PALETTE, TEMPLATE, ci_whiskers, has_ci, note,
                                           reference_markers, titled)

# The conditions of DESIGN.md in reading order; others follow alphabetically.
ORDER = ("full", "keep_latest_reasoning", "delete_latest_reasoning", "delete_all_reasoning", "clear_after_code",
         "iclr", "random", "hide_observation", "hide_stderr")


def intervention_conditions(result: dict) -> dict[str, dict]:
    """{condition: {mean, ci, n, n_generations, truncated, parse_failures, reacquisition_rate}} in ORDER, from
    interventions.json's ``summary``.

    The layout is ``interp.continuations.run.FIELDS``: ``summary`` {name: {"mean_score" (0..1 or null; truncated
    turns left out), "ci" ([lo, hi] or null), "n_states", "n_generations", "truncated" (generations cut off by the
    token limit), "parse_failures", "reacquisition_rate" (fraction or null), ...}}. Conditions with neither a score
    nor a truncated generation are left out.
    """
    conditions = {name: {"mean": entry["mean_score"], "ci": entry["ci"], "n": entry["n_states"],
                         "n_generations": entry.get("n_generations"), "truncated": entry.get("truncated", 0),
                         "parse_failures": entry["parse_failures"], "reacquisition_rate": entry["reacquisition_rate"]}
                  for name, entry in result["summary"].items()}
    names = sorted(conditions, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    return {name: conditions[name] for name in names
            if conditions[name]["mean"] is not None or conditions[name]["truncated"]}


def interventions_figure(result: dict) -> go.Figure:
    """Mean continuation score by history condition with CIs (a), and the re-acquisition rate per condition (b).

    Reads interventions.json's ``summary`` (see ``intervention_conditions``) and its ``rows``: every scored turn
    is drawn as a point over its condition's bar (a score of 0 shows although its bar has no height); reference
    values come from ``interp.reporting.reference``. Both panels share the condition axis
    (labels once, horizontal, under panel b). A condition whose CI has no width (all
    states from one task, or one scored state) gets no error bar and a note saying so, as does a condition
    with no scored turn (all cut off), and the count of turns that did not parse (empty ones named).
    """
    conditions = intervention_conditions(result)
    if not conditions:
        raise ValueError("no condition with a score or a truncated generation in 'summary'")
    names = list(conditions)
    rates = [n for n in names if conditions[n].get("reacquisition_rate") is not None]
    fig = make_subplots(rows=2 if rates else 1, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        row_heights=[0.62, 0.38] if rates else None, subplot_titles=(
                            "a  continuation score by history condition",
                            *(["b  re-acquisition rate (re-running or re-reading what the edit hid)"] if rates else [])))
    label = {n: _label(n, conditions[n]) for n in names}
    mean = [conditions[n]["mean"] for n in names]
    ci = [conditions[n].get("ci") for n in names]
    fig.add_trace(go.Bar(
        x=[label[n] for n in names], y=mean, marker_color=PALETTE[0], name="ours (mean, 95% CI where there is one)",
        legendgroup="ours", hovertemplate="%{x}: %{y:.3f}<extra></extra>",
        text=[f"{m:.2f}" if m is not None else "" for m in mean], textposition="outside", cliponaxis=False,
    ), 1, 1)
    if whiskers := ci_whiskers([label[n] for n in names], mean, ci, legendgroup="ours"):
        fig.add_trace(whiskers, 1, 1)
    scored = [(label[r["condition"]], r["score"], f"{r.get('state_id', '?')} ({r.get('sample', '?')})")
              for r in result.get("rows") or [] if r.get("score") is not None and r.get("condition") in label]
    if scored:  # every scored turn, so a score of 0 shows although its bar has no height
        x, y, text = zip(*scored)
        fig.add_trace(go.Box(x=list(x), y=list(y), boxpoints="all", jitter=0.5, pointpos=0, fillcolor="rgba(0,0,0,0)",
                             line=dict(color="rgba(0,0,0,0)"), marker=dict(color="black", size=6, opacity=0.6),
                             name="each scored turn", hovertext=list(text),
                             hovertemplate="%{hovertext}: %{y:.3f}<extra></extra>"), 1, 1)

    known = [n for n in names if n in reference.CONTINUATIONS]
    if known:
        fig.add_trace(reference_markers([label[n] for n in known], [reference.CONTINUATIONS[n] for n in known]), 1, 1)
    # below 0 so that scores of 0 show above the axis line; above 1 for the notes, clear of the data
    fig.update_yaxes(title_text="score (rubric, 0–1)", range=[-0.06, 1.32], tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0],
                     zeroline=False, row=1, col=1)
    no_ci = [n for n, m, c in zip(names, mean, ci) if m is not None and not has_ci(c)]
    unscored = [n for n in names if conditions[n]["mean"] is None]
    notes = ([f"no CI for {len(no_ci)} of {len(names)} conditions: too few scored states or tasks "
              f"(n = {', '.join(sorted({str(conditions[n]['n']) for n in no_ci}))} states)"] if no_ci else []) + (
        [f"no scored turn under {', '.join(unscored)}: every turn was cut off by the token limit "
         "(counted as truncated, not scored)"] if unscored else [])
    rows = [r for r in result.get("rows") or [] if r.get("condition") in label]
    empty = sum(bool(r.get("parse_failure")) and not (r.get("text") or "").strip() for r in rows)
    failed = sum(bool(r.get("parse_failure")) for r in rows)
    if failed:
        notes.append(f"{failed} of {len(rows)} turns did not parse as a turn of the trajectory's format"
                     + (f" ({empty} empty: the model ended its turn at once)" if empty else "")
                     + "; they score 0")
    if notes:
        note(fig, "<br>".join(notes))
    if rates:
        fig.add_trace(go.Bar(
            x=[label[n] for n in rates], y=[100 * conditions[n]["reacquisition_rate"] for n in rates],
            marker_color=PALETTE[1], name="re-acquisition rate (of n generations)",
            text=[f"{100 * conditions[n]['reacquisition_rate']:.0f}% of {conditions[n].get('n_generations', '?')}"
                  for n in rates], textposition="outside", cliponaxis=False,
        ), 2, 1)
        fig.update_yaxes(title_text="% of generations", range=[0, 125], row=2, col=1)
    fig.update_xaxes(tickangle=0, type="category", categoryorder="array", categoryarray=[label[n] for n in names])
    fig.update_layout(template=TEMPLATE, height=820 if rates else 580, legend=BOTTOM_LEGEND, margin=dict(b=230))
    titled(fig, "Controlled continuations: mean score and re-acquisition by history condition",
           ["one next turn generated by the sensor from fixed states, not a final task score", "n = states",
            "truncated turns (cut off by the token limit) are counted, not scored"])
    return fig


def _label(name: str, entry: dict) -> str:
    """Tick label: the condition name on up to two lines, then n, truncated turns and parse failures."""
    words = name.split("_")
    half = (len(words) + 1) // 2
    text = " ".join(words[:half]) + ("<br>" + " ".join(words[half:]) if words[half:] else "")
    failures, truncated = entry.get("parse_failures"), entry.get("truncated")
    return (text + f"<br>n = {entry.get('n', '?')}" + (f"<br>{truncated} truncated" if truncated else "")
            + (f"<br>{failures} unparsed" if failures else ""))
