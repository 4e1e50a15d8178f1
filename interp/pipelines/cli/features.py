"""Commands that read the sensor's features: ``extract`` (activation store), ``merge`` and ``entropy`` (ICLR)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.extraction.entropy import IclrConfig
from interp.extraction.extract import ExtractConfig
from interp.params import LAYERS_NOTE
from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.executors import ExecutorSettings
from interp.pipelines.cli.common import (
    AllowControlOpt,
    DeviceOpt,
    DtypeOpt,
    GateScorerOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    app,
    check_gate_scorer,
    config_options,
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
@config_options(ExtractConfig, {"poolings": "--pooling"}, skip=("layers", "attention_layers"),
                fixed={"layers": (), "attention_layers": ()})  # resolved on the model below
def extract(
    trajectories: TrajectoriesOpt,
    store: Annotated[Path, typer.Option("--store", help="Activation store directory (created or resumed).")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    layers: Annotated[str, typer.Option(help="all | full_attention | 0,4,8 | 0-7 | 1based:4,8,32. " + LAYERS_NOTE)] = "all",
    conditions: Annotated[str, typer.Option(help="Comma list of history conditions.")] = "full",
    attention: Annotated[str, typer.Option(help="Boundary attention at: full_attention | none | layer list. "
                                                + LAYERS_NOTE)] = "full_attention",
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of boundaries b (default: 1..last step).")] = None,
    shard: ShardOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    gate_scorer: GateScorerOpt = None,
    *,
    executor: ExecutorSettings,
    config: ExtractConfig,
) -> None:
    """Extract pooled boundary residuals and boundary attention into an activation store (resumable)."""
    from interp.data.conditions import check_condition_name
    from interp.extraction.batch import (
        layer_numbers,
        parse_boundaries,
        parse_layers,
        parse_shard,
    )

    # every option is checked before the model loads and before the store is touched
    check_output_dir(store, "--store")
    layer_numbers(layers, "--layers")
    if attention != "none":
        layer_numbers(attention, "--attention")
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
    config = replace(config, layers=parse_layers(layers, sensor.n_layers, sensor.full_attention_layers, "--layers"),
                     attention_layers=attn_layers)
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
@config_options(IclrConfig)
def entropy(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="CSV of per-block scores to write.")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    *,
    config: IclrConfig,
) -> None:
    """Write per-block ICLR entropy scores (bits) and which blocks ICLR drops at rho (online by default)."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give the CSV file to write")
    check_output_dir(out.parent, "--out")
    dtype = model_options(device, dtype, IclrConfig)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    table = stages.entropy(load_sensor(model, model_path, device, dtype), trajs, out, config)
    steps = table.drop_duplicates(["task_id", "step"])
    line = (f"{out}: {len(table)} blocks, {int(table['dropped'].sum())} dropped at rho={config.rho} ({config.context}); "
            f"{int((~steps['scored']).sum())} steps not scored (over {config.max_tokens} tokens)")
    if config.compare_full:
        multi = table[table["n_blocks_in_step"] > 1]
        differ = multi.groupby(["task_id", "step"]).apply(
            lambda g: bool((g["dropped"] != g["dropped_full"].astype(bool)).any()), include_groups=False)
        line += f"; drop decisions differ from full context in {int(differ.sum())} of {len(differ)} steps with >1 block"
    console.print(line, markup=False)
