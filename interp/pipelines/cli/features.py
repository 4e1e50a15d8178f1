"""Commands that read the sensor's features: ``extract`` (activation store), ``merge`` and ``entropy`` (ICLR)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.extraction.entropy import IclrConfig
from interp.sensor.limits import DEFAULT_MAX_TOKENS
from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.executors import ExecutorSettings
from interp.pipelines.cli.common import (
    LAYERS_0_BASED,
    AllowControlOpt,
    DeviceOpt,
    DtypeOpt,
    GateScorerOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    app,
    build,
    check_gate_scorer,
    console,
    executor_for,
    executor_options,
    load_sensor,
    model_options,
    option,
    split_list,
)


@app.command()
@executor_options
def extract(
    trajectories: TrajectoriesOpt,
    store: Annotated[Path, typer.Option("--store", help="Activation store directory (created or resumed).")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    layers: Annotated[str, typer.Option(help="all | full_attention | 0,4,8 | 0-7 | 1based:4,8,32. " + LAYERS_0_BASED)] = "all",
    sites: Annotated[str, typer.Option(help="Comma list of resid_pre, resid_post, attn_out, mlp_out.")] = "resid_pre",
    pooling: Annotated[str, typer.Option(help="Comma list: last, mean_last:N, mean_latest_step, mean_reasoning, "
                                                "mean_generation_prompt.")] = "last",
    conditions: Annotated[str, typer.Option(help="Comma list of history conditions.")] = "full",
    attention: Annotated[str, typer.Option(help="Boundary attention at: full_attention | none | layer list. "
                                                + LAYERS_0_BASED)] = "full_attention",
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of boundaries b (default: 1..last step).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Longer contexts are skipped and recorded, never truncated.")] = DEFAULT_MAX_TOKENS,
    shard: ShardOpt = None,
    no_share_prefix: Annotated[bool, typer.Option("--no-share-prefix", help="One forward per boundary (reference path).")] = False,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    gate_scorer: GateScorerOpt = None,
    *,
    executor: ExecutorSettings,
) -> None:
    """Extract pooled boundary residuals and boundary attention into an activation store (resumable)."""
    from interp.data.conditions import check_condition_name
    from interp.extraction.batch import (
        layer_numbers,
        parse_boundaries,
        parse_layers,
        parse_shard,
    )
    from interp.extraction.extract import ExtractConfig

    # every option is checked before the model loads and before the store is touched
    check_output_dir(store, "--store")
    layer_numbers(layers, "--layers")
    if attention != "none":
        layer_numbers(attention, "--attention")
    with option("--sites"):
        ExtractConfig(layers=[0], sites=split_list(sites))
    with option("--pooling"):
        ExtractConfig(layers=[0], poolings=split_list(pooling))
    with option("--max-tokens"):
        ExtractConfig(layers=[0], max_tokens=max_tokens)
    with option("--conditions"):
        if not split_list(conditions):
            raise ValueError("no condition given")
        for cond in split_list(conditions):
            check_condition_name(cond)  # parameters (ICLR's scorer) come from the model, checked before any unit
    check_gate_scorer(split_list(conditions), gate_scorer)
    with option("--shard"):
        chosen_shard = parse_shard(shard)
    dtype = model_options(device, dtype, ExtractConfig)
    runner, load = executor_for(executor, model, model_path, device, dtype)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    chosen_boundaries = parse_boundaries(boundaries, trajs) if boundaries else None
    sensor = load_sensor(model, model_path, device, dtype)
    attn_layers = ([] if attention == "none" else
                   parse_layers(attention, sensor.n_layers, sensor.full_attention_layers, "--attention"))
    not_full = sorted(set(attn_layers) - set(sensor.full_attention_layers))
    if not_full:
        raise ValueError(f"--attention: layers {not_full} are linear-attention layers and have no attention pattern")
    config = ExtractConfig(
        layers=parse_layers(layers, sensor.n_layers, sensor.full_attention_layers, "--layers"), sites=split_list(sites),
        poolings=split_list(pooling), attention_layers=attn_layers, max_tokens=max_tokens,
        share_prefix=not no_share_prefix,
    )
    counts = stages.extract(sensor, trajs, split_list(conditions), config, store, chosen_shard, chosen_boundaries, runner,
                            load, gate_scorer)
    console.print(f"{store}: {counts}", markup=False)


@app.command()
def merge(
    target: Annotated[Path, typer.Argument(help="Store (or --out folder) to create or extend.")],
    shards: Annotated[list[Path], typer.Argument(help="Shard stores, or shard --out folders of patch, harm or "
                                                      "intervene, from --shard I/N runs with the same settings.")],
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Merge an incomplete set of shards.")] = False,
) -> None:
    """Join the outputs of --shard I/N runs: stores into one store; patch/harm/intervene part folders into one
    --out (then re-run that command on it without --shard to write its summary; nothing is recomputed)."""
    check_output_dir(target, "TARGET")
    done = stages.merge(target, shards, allow_partial)
    if done["kind"] == "store":
        console.print(f"{target}: {done['rows']} rows from {len(shards)} shard(s)")
    else:
        missing = sum(len(m) for m in done["missing"].values())
        console.print(f"{target}: {len(done['missing'])} part folder(s) from {len(shards)} shard(s)"
                      + (f", {missing} unit(s) missing" if missing else "")
                      + "; re-run the command without --shard with this --out for its summary", markup=False)


@app.command()
def entropy(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="CSV of per-block scores to write.")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    rho: Annotated[float, typer.Option(help="ICLR drop fraction per step.")] = IclrConfig.rho,
    context: Annotated[str, typer.Option(help="Scorer context: online (the study: step t on the history with steps "
                                              "1..t-1 already compressed) | full (departure: the uncompressed "
                                              "trajectory) | step_only (only the step's reasoning).")
                       ] = IclrConfig.context,
    compare_full: Annotated[bool, typer.Option(help="Add full-context scores and drops (one more forward per "
                                                    "trajectory) for the online-vs-full agreement.")
                            ] = IclrConfig.compare_full,
    max_tokens: Annotated[int, typer.Option(help="Scorer input limit in tokens (over it: step not scored, its "
                                                 "length recorded; never truncated).")] = IclrConfig.max_tokens,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Write per-block ICLR entropy scores (bits) and which blocks ICLR drops at rho (online by default)."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give the CSV file to write")
    check_output_dir(out.parent, "--out")
    config = build(IclrConfig, rho=rho, context=context, compare_full=compare_full, max_tokens=max_tokens)
    dtype = model_options(device, dtype, IclrConfig)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    table = stages.entropy(load_sensor(model, model_path, device, dtype), trajs, out, config)
    steps = table.drop_duplicates(["task_id", "step"])
    line = (f"{out}: {len(table)} blocks, {int(table['dropped'].sum())} dropped at rho={rho} ({context}); "
            f"{int((~steps['scored']).sum())} steps not scored (over {max_tokens} tokens)")
    if compare_full:
        multi = table[table["n_blocks_in_step"] > 1]
        differ = multi.groupby(["task_id", "step"]).apply(
            lambda g: bool((g["dropped"] != g["dropped_full"].astype(bool)).any()), include_groups=False)
        line += f"; drop decisions differ from full context in {int(differ.sum())} of {len(differ)} steps with >1 block"
    console.print(line, markup=False)
