"""``interp tokens``: request-level token accounting of history policies with a prefix cache (no model forward)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines import stages
from interp.accounting.tokens import TokensConfig
from interp.schema import as_object
from interp.pipelines.cli.common import AllowControlOpt, GateScorerOpt, ModelPathOpt, TrajectoriesOpt, app, \
    check_gate_scorer, config_options, console, option


@app.command()
@config_options(TokensConfig)
def tokens(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for tokens.json.")],
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="Whose tokens are counted: a model spec (see "
                                           "`interp models`) or a local HF directory; the acting model's tokenizer "
                                           "is what a bill counts.")] = "smollm2-135m",
    model_path: ModelPathOpt = None,
    entropy: Annotated[Optional[Path], typer.Option(
        "--entropy", help="Block-entropy CSV of `interp entropy` (online rows for iclr, step_only rows for "
                          "iclr_step_only); without it the ICLR policies are skipped.")] = None,
    paired: Annotated[Optional[Path], typer.Option(
        "--paired", help="Trajectory file of a compressed run of the same tasks (matched by task_id); "
                         "--trajectories is then the base run, accounted under full. Or the run log of `interp "
                         "serve` under a policy, --trajectories the run log without it: live usage, see --prices.")]
    = None,
    prices: Annotated[Optional[Path], typer.Option(
        "--prices", help="Paired run logs: a JSON price table, USD per million tokens of uncached_input, "
                         "cache_read, cache_write and output.")] = None,
    allow_control_tokens: AllowControlOpt = False,
    gate_scorer: GateScorerOpt = None,
    *,
    config: TokensConfig,
) -> None:
    """Input, cache-read, cache-write and output tokens per request under each policy; paired-run amplification."""
    from interp.accounting.tokens import read_entropy_table
    from interp.serve.runlog import is_run_log
    from interp.sensor.models import load_tokenizer

    check_output_dir(out, "--out")
    if paired is not None and is_run_log(paired):
        _paired_logs(trajectories, paired, prices, out, config)
        return
    if prices is not None:  # trajectory accounting has no billed usage to price
        raise ValueError(f"--prices {prices}: prices apply to paired run logs of `interp serve` (--paired RUNLOG); "
                         "with trajectory files, price the totals of tokens.json yourself")
    with option("--gate-scorer"):
        check_gate_scorer(["drsr_gate"] if config.uses("drsr_gate") else [], gate_scorer)
    if entropy is not None:
        with option("--entropy"):
            read_entropy_table(entropy)
    trajs = stages.trajectories(trajectories, allow_control_tokens=allow_control_tokens)
    pair = None if paired is None else stages.trajectories(paired, allow_control_tokens=allow_control_tokens)
    doc = stages.tokens(trajs, out, load_tokenizer(tokenizer, model_path), config, entropy, pair, gate_scorer)
    for row in doc["totals"]:
        rel = "" if row["rel_input"] is None else (f"  input {row['rel_input']:+.1%}, cache read "
                                                   f"{row['rel_cache_read']:+.1%}, output {row['rel_output']:+.1%}")
        console.print(f"{row['policy']}: {row['n_requests']} requests, input {row['input_tokens']:,}, cache read "
                      f"{row['cache_read_tokens']:,}, output {row['output_tokens']:,}{rel}", markup=False)
    for s in doc["skipped"]:
        console.print(f"{s['policy']}: skipped: {s['reason']}", markup=False)
    if doc["pair"]:
        p = doc["pair"]
        amp = "-" if p["amplification"] is None else f"{p['amplification']:.2f}"
        totals = as_object(p["totals"])
        console.print(f"paired ({p['policy']}, {p['n_tasks']} tasks): total change {totals['total_change']:+,.0f} "
                      f"= direct {totals['direct_change']:+,.0f} + requests "
                      f"{totals['request_count_change']:+,.0f} + context {totals['context_change']:+,.0f}; "
                      f"amplification {amp} {p['amplification_ci']}", markup=False)
    console.print(f"{out / 'tokens.json'} ({doc['seconds']:.1f} s, tokenizer {doc['tokenizer']})", markup=False)


def _paired_logs(base: Path, compressed: Path, prices: Optional[Path], out: Path, config: TokensConfig) -> None:
    """Paired live runs from two run logs of `interp serve`: paired.json in ``out`` and its summary."""
    from interp.serve.runlog import is_run_log, paired_line, read_prices, write_paired

    if not is_run_log(base):
        raise ValueError(f"--trajectories {base}: with a run log as --paired, give the other run's log folder")
    table = None
    if prices is not None:
        with option("--prices"):
            table = read_prices(prices)
    doc = write_paired(base, compressed, out, table, config=config, prices_file=prices)
    console.print(paired_line(doc), markup=False)
    if doc["cost"]:
        console.print(f"cost: base ${doc['cost']['base']['cost_usd']:.4f}, with the policy "
                      f"${doc['cost']['compressed']['cost_usd']:.4f}", markup=False)
    console.print(f"{out / 'paired.json'}", markup=False)
