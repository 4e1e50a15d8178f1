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
    LAYERS_0_BASED,
    AllowControlOpt,
    BoundaryTokensOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    app,
    build,
    checked,
    console,
    executor_for,
    executor_options,
    load_sensor,
    model_options,
    shard_option,
)
from patching.config import DrsrConfig


OPTIONS = {"relation_layer": "--layer"}  # config field -> option, where the option's name is not the field's


@app.command()
@executor_options
def drsr(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for drsr.json (and per-boundary parts).")],
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of task_id@b (default: middle boundary of each).")] = None,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    max_k: Annotated[int, typer.Option("--max-k", help="Largest set cardinality (DRSR's).")] = DrsrConfig.max_k,
    budget: Annotated[int, typer.Option(help="Sampled sets per cardinality >= 2.")] = DrsrConfig.budget,
    seed: Annotated[int, typer.Option(help="Seed of the sampled sets.")] = DrsrConfig.seed,
    units: Annotated[str, typer.Option(help="Comma list of deletion unit kinds (default: all; granularity needs step "
                                            "and a block kind).")] = ",".join(DrsrConfig.units),
    margin: Annotated[float, typer.Option(help="Pair-ordering margin in nats/token.")] = DrsrConfig.margin,
    unsafe: Annotated[float, typer.Option(help="Unsafe-harm threshold in nats/token (the toolkit's assumption; DRSR "
                                               "states 0.020 as its pair margin, not as an unsafe cut).")
                    ] = DrsrConfig.unsafe,
    layer: Annotated[Optional[int], typer.Option("--layer", help="Layer of the margin curve and of semantic overlap "
                                                 "(default: the middle layer). " + LAYERS_0_BASED)
                     ] = DrsrConfig.relation_layer,
    proj_dim: Annotated[int, typer.Option("--proj-dim", help="Stored representation size (seeded Gaussian "
                                          "projection; 0: none).")] = DrsrConfig.proj_dim,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples for the CIs.")] = DrsrConfig.n_boot,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    max_tokens: BoundaryTokensOpt = DrsrConfig.max_tokens,
    gate_scorer: Annotated[Optional[Path], typer.Option("--gate-scorer", help="gate_scorer.json of `interp gate "
                                                        "train`: its gate's selection splits the attention density "
                                                        "(DRSR's split; default: exact harm, the toolkit's).")] = None,
    *,
    executor: ExecutorSettings,
) -> None:
    """DRSR's mechanistic appendix: step vs block harm, relations across depth, interaction structure, attention."""
    check_output_dir(out, "--out")
    config = build(DrsrConfig, OPTIONS, boundaries=boundaries, max_k=max_k, budget=budget, seed=seed, units=units,
                   margin=margin, unsafe=unsafe, relation_layer=layer, proj_dim=proj_dim, n_boot=n_boot,
                   max_tokens=max_tokens)
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
                  f"of 2+ units; median step-harm range {g['step_range']['median']}, block-harm range "
                  f"{g['block_range']['median']}; {len(result['skipped'])} skipped (over {max_tokens} tokens)",
                  markup=False)
