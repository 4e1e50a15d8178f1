"""``interp drsr``: DRSR's mechanistic appendix (granularity, relations across depth, interaction structure,
attention density) from one harm run per boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.executors import ExecutorSettings
from interp.pipelines.cli.common import (
    AllowControlOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    app,
    checked,
    config_options,
    console,
    executor_for,
    executor_options,
    load_sensor,
    model_options,
    shard_option,
)
from interp.schema import as_object
from patching.config import DrsrConfig


OPTIONS = {"relation_layer": "--layer"}  # config field -> option, where the option's name is not the field's


@app.command()
@executor_options
@config_options(DrsrConfig, OPTIONS)
def drsr(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for drsr.json (and per-boundary parts).")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    gate_scorer: Annotated[Optional[Path], typer.Option("--gate-scorer", help="gate_scorer.json of `interp gate "
                                                        "train`: its gate's selection splits the attention density "
                                                        "(DRSR's split; default: exact harm, the toolkit's).")] = None,
    *,
    executor: ExecutorSettings,
    config: DrsrConfig,
) -> None:
    """DRSR's mechanistic appendix: step vs block harm, relations across depth, interaction structure, attention."""
    check_output_dir(out, "--out")
    dtype = model_options(device, dtype, DrsrConfig)
    runner, load = executor_for(executor, model, model_path, device, dtype)
    chosen_shard = shard_option(shard)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    checked(config.boundary_keys, trajs)  # before the model loads
    sensor = load_sensor(model, model_path, device, dtype)
    result = checked(stages.drsr, sensor, trajs, out, config, shard=chosen_shard, executor=runner, load=load,
                     gate_scorer=gate_scorer, options=OPTIONS)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} boundaries", markup=False)
        return
    g = result["granularity"]
    console.print(f"{out / 'drsr.json'}: {len(result['boundaries'])} boundaries, {result['relations']['n_sets']} sets "
                  f"of 2+ units; median step-harm range {as_object(g['step_range'])['median']}, block-harm range "
                  f"{as_object(g['block_range'])['median']}; {len(result['skipped'])} skipped (over {config.max_tokens} tokens)",
                  markup=False)
