"""Figure 12: what each history policy sends and saves in tokens, from tokens.json (``interp.accounting.tokens``).

Panel a stacks, per policy, the input tokens read from the prefix cache, the
input tokens written (not served by the cache) and the output tokens, summed
over every request of every task. Panel b sets each policy's direct removal
against its total change in input + output tokens relative to ``full``
(replayed recorded runs lie on ``total = -removal``: the same requests, the
same outputs); with a paired run, each task's direct change and total change
are added, so amplification shows as distance from that line.
"""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from interp.reporting.figures.theme import BOTTOM_LEGEND, GREY, PALETTE, TEMPLATE, titled
from interp.reporting.numbers import pct, shown


def tokens_figure(result: dict) -> go.Figure:
    """Stacked cache-read / cache-write / output tokens per policy (a) and direct removal vs total change (b)."""
    totals = result["totals"]
    if not totals:
        raise ValueError("tokens.json has no policy totals")
    fig = make_subplots(rows=1, cols=2, column_widths=[0.58, 0.42], horizontal_spacing=0.13, subplot_titles=(
        "a  tokens per policy (all requests)", "b  direct removal vs total change"))
    names = [row["policy"] for row in totals]
    for i, (col, label) in enumerate((("cache_read_tokens", "input read from the cache"),
                                      ("cache_write_tokens", "input written to the cache"),
                                      ("output_tokens", "output"))):
        fig.add_trace(go.Bar(y=names, x=[row[col] for row in totals], name=label, orientation="h",
                             marker=dict(color=PALETTE[i]),
                             hovertemplate="%{y}: %{x:,} tokens<extra>" + label + "</extra>"), 1, 1)
    full = next((row for row in totals if row["policy"] == "full"), None)
    removal = [row["direct_removal_tokens"] for row in totals]
    if full is not None:
        base = full["input_tokens"] + full["output_tokens"]
        change = [row["input_tokens"] + row["output_tokens"] - base for row in totals]
        fig.add_trace(go.Scatter(x=removal, y=change, mode="markers+text", text=names, textposition="middle right", textfont=dict(size=11),
                                 name="policy (replayed runs)", marker=dict(size=10, color=PALETTE[3]),
                                 hovertemplate="%{text}: removal %{x:,}, total change %{y:,}<extra></extra>"), 1, 2)
    pair = result.get("pair")
    if pair:
        fig.add_trace(go.Scatter(
            x=[-r["direct_change"] for r in pair["per_task"]], y=[r["total_change"] for r in pair["per_task"]],
            mode="markers", name=f"paired run, per task ({pair['policy']})", text=[r["task_id"] for r in pair["per_task"]],
            marker=dict(size=8, color=PALETTE[4], symbol="circle-open"),
            hovertemplate="%{text}: removal %{x:,.0f}, total change %{y:,.0f}<extra></extra>"), 1, 2)
        removal = removal + [-r["direct_change"] for r in pair["per_task"]]
    top = max(removal + [1])
    fig.add_trace(go.Scatter(x=[0, top], y=[0, -top], mode="lines", name="total change = -removal (proportional)",
                             line=dict(color=GREY, dash="dash")), 1, 2)
    fig.update_layout(template=TEMPLATE, barmode="stack", height=620, legend=BOTTOM_LEGEND, margin=dict(b=170))
    fig.update_xaxes(title_text="tokens (sum over requests and tasks)", row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)  # policies top-down in file order
    fig.update_xaxes(title_text="direct removal (input tokens)", range=[-0.05 * top, 1.6 * top], row=1, col=2)
    fig.update_yaxes(title_text="total change vs full (input + output tokens)", row=1, col=2)
    cache = result.get("cache_model") or {}
    parts = [f"{len({r['task_id'] for r in result.get('per_task', [])})} tasks",
             f"tokenizer {str(result.get('tokenizer', '?')).rstrip('/').rsplit('/', 1)[-1]}",
             f"cache: exact prefix reuse of the previous prompt + output, block {cache.get('block', '?')}, "
             f"minimum {cache.get('min_prefix', '?')} tokens"]
    if pair and pair.get("amplification") is not None:
        ci = pair.get("amplification_ci")
        parts.append(f"paired amplification {pair['amplification']:.2f}"
                     + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else " (no CI)") + f", {pair['n_tasks']} tasks")
    titled(fig, "Tokens sent, cached and generated under each history policy", parts)
    return fig


def tokens_section(result: dict, folder: Path | None = None) -> list[str]:
    """The report's lines for tokens.json: per-policy totals and relative changes beside the reference study's,
    the skipped policies, the paired decomposition and the time the accounting took."""
    from interp.reporting import reference as ref

    lines = ["Per request k, the prompt at boundary k-1 under the policy's history (input), the longest exact token "
             "prefix it shares with request k-1's prompt + output (cache read, under the cache model), the rest of "
             "the prompt (cache write) and the recorded step k (output); sums over every request of every task. "
             "Replayed recorded runs: the same requests and outputs under every policy, so output changes are 0 here "
             f"(the reference re-ran its agents, {ref.TOKENS_N_TASKS} tasks).", "",
             "| policy | requests | input | cache read | cache write | output | direct removal | Δ input | "
             "Δ cache read | Δ output | reference Δ input / cache read / output |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["totals"]:
        theirs = ref.TOKENS.get(row["policy"])
        cell = " / ".join(shown(pct(theirs[k], signed=True)) for k in ("input", "cache_read", "output")) \
            if theirs else "-"
        changes = " | ".join(shown(pct(row[k], signed=True)) for k in ("rel_input", "rel_cache_read", "rel_output"))
        lines.append(f"| {row['policy']} | {row['n_requests']} | {row['input_tokens']:,} | "
                     f"{row['cache_read_tokens']:,} | {row['cache_write_tokens']:,} | {row['output_tokens']:,} | "
                     f"{row['direct_removal_tokens']:,} | {changes} | {cell} |")
    lines.append("")
    lines += [f"- _{s['policy']} not accounted: {s['reason']}_" for s in result.get("skipped", [])]
    pair = result.get("pair")
    if pair:
        t = pair["totals"]
        amp = "n/a" if pair["amplification"] is None else f"{pair['amplification']:.2f}"
        ci = pair.get("amplification_ci")
        lines += ["", f"Paired runs ({pair['policy']}, {pair['n_tasks']} tasks matched by task_id): total change "
                      f"{t['total_change']:+,.0f} tokens = direct {t['direct_change']:+,.0f} + request count "
                      f"{t['request_count_change']:+,.0f} + per-request context {t['context_change']:+,.0f}; "
                      f"amplification |total| / removal {amp} " + (f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "(no CI)")
                      + " (task bootstrap)."]
    cache = result.get("cache_model") or {}
    lines += ["", f"Tokenizer `{result.get('tokenizer')}`; cache block {cache.get('block')}, minimum prefix "
                  f"{cache.get('min_prefix')}; ICLR decisions from `{result.get('entropy_table') or 'none'}`; "
                  f"accounting took {result.get('seconds', 0):.1f} s (no model forward). Data: `tokens/tokens.json`."]
    return lines
