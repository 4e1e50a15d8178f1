"""Figure 6: ICLR block scores, what is kept and what is replaced by [SKIP], from iclr_blocks.csv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.ran import setting
from interp.reporting.figures.theme import BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE, titled

KEPT, SKIPPED = PALETTE[0], PALETTE[1]
MIN_TASKS_MEAN = 3
"""A step's mean over tasks is drawn only when at least this many tasks reach the step."""


def iclr_figure(blocks: pd.DataFrame) -> go.Figure:
    """Block entropy distributions of kept vs skipped blocks, and the fraction of reasoning tokens removed per step.

    Reads iclr_blocks.csv (interp.extraction.entropy.DROP_TABLE_FIELDS): one row per reasoning block,
    columns task_id, context (online: scored on the compressed history, the study's method), step,
    n_tokens, mean_entropy_bits (bits/token, empty when not scored), scored (bool: the step's
    input fit the limit), dropped (bool: replaced by [SKIP]); rho and the token limit from its record
    (iclr_blocks.json, ``blocks.attrs["record"]``).
    """
    rho, limit = setting(blocks, "rho"), setting(blocks, "max_tokens")
    blocks = blocks.assign(scored=csv_bool(blocks["scored"]), dropped=csv_bool(blocks["dropped"]))
    scored = blocks[blocks["scored"]]
    if scored.empty:
        raise ValueError("no row has scored = True (every step exceeded the scorer context?)")
    steps = (scored.assign(removed=scored["n_tokens"] * scored["dropped"])
             .groupby(["task_id", "step"], as_index=False)[["removed", "n_tokens"]].sum())
    steps["fraction"] = steps["removed"] / steps["n_tokens"].where(steps["n_tokens"] > 0)
    n_unscored = blocks.loc[~blocks["scored"], ["task_id", "step"]].drop_duplicates().shape[0]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "a  block entropy: kept vs replaced by [SKIP]", "b  reasoning tokens removed per step"))
    entropy = scored["mean_entropy_bits"].astype(float)
    bins = dict(start=float(entropy.min()), end=float(entropy.max()) + 1e-9,
                size=max((float(entropy.max()) - float(entropy.min())) / 30, 1e-3))
    for name, colour, mask in (("kept", KEPT, ~scored["dropped"]), ("replaced by [SKIP]", SKIPPED, scored["dropped"])):
        fig.add_trace(go.Histogram(x=entropy[mask], xbins=bins, name=f"{name} ({int(mask.sum())} blocks)",
                                   marker=dict(color=colour, line=dict(color="white", width=0.5))), 1, 1)
    rng = np.random.default_rng(0)  # fixed jitter: the figure is reproducible
    fig.add_trace(go.Scatter(
        x=steps["step"] + rng.uniform(-0.15, 0.15, len(steps)), y=steps["fraction"], mode="markers",
        marker=dict(color=PALETTE[2], size=7, opacity=0.6), name="one step of one task",
        hovertext=[f"{t} step {s}" for t, s in zip(steps["task_id"], steps["step"])],
        hovertemplate="%{hovertext}: %{y:.2f}<extra></extra>",
    ), 1, 2)
    per_step = steps.groupby("step")["fraction"].agg(["mean", "size"])
    shown = per_step[per_step["size"] >= MIN_TASKS_MEAN]
    fig.add_trace(go.Scatter(
        x=shown.index, y=shown["mean"], mode="lines+markers", customdata=shown["size"],
        name=f"mean over tasks (steps reached by ≥ {MIN_TASKS_MEAN} tasks; n in the hover)",
        hovertemplate="step %{x}: mean %{y:.2f} over %{customdata} tasks<extra></extra>",
        line=dict(color="black", width=2), marker=dict(symbol="diamond", size=9)), 1, 2)
    total = steps["removed"].sum() / max(steps["n_tokens"].sum(), 1)
    x_range = [float(steps["step"].min()) - 0.5, float(steps["step"].max()) + 0.5]
    fig.add_trace(go.Scatter(x=x_range, y=[total, total], mode="lines", line=dict(color=GREY, dash="dot"),
                             name=f"all steps pooled: {total:.0%} of reasoning tokens replaced"), 1, 2)
    fig.update_layout(template=TEMPLATE, height=600, barmode="group", legend=BOTTOM_LEGEND, margin=dict(b=170))
    titled(fig, "ICLR: predictive entropy of reasoning blocks and the blocks replaced by [SKIP]",
           [f"{_context(blocks)}rho = {rho}", f"{len(scored)} scored blocks in {len(steps)} steps of "
            f"{steps['task_id'].nunique()} tasks", f"{n_unscored} steps not scored (scorer context over the "
            f"{limit}-token limit, never truncated)", f"{int((per_step['size'] < MIN_TASKS_MEAN).sum())} late steps without a mean "
            f"(fewer than {MIN_TASKS_MEAN} tasks)"])
    fig.update_xaxes(title_text="mean token predictive entropy of the block (bits/token)", row=1, col=1)
    fig.update_yaxes(title_text="reasoning blocks (count)", row=1, col=1)
    fig.update_xaxes(title_text="step t (1-based)", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="reasoning tokens replaced (fraction of the step)", range=[-0.03, 1.05], row=1, col=2)
    return fig


def _context(blocks: pd.DataFrame) -> str:
    """``"<context> context; "`` from the table's context column (online: the study's method), or ``""``."""
    if "context" not in blocks:
        return ""
    return ", ".join(sorted(set(blocks["context"].dropna().astype(str)))) + " context, "


def csv_bool(column: pd.Series) -> pd.Series:
    """A CSV boolean column (True/False, true/false or 1/0) as bool; missing counts as False."""
    if column.dtype == bool:
        return column
    return column.astype(str).str.strip().str.lower().isin({"true", "1", "1.0"})
