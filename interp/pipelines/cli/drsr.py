"""``interp drsr``: DRSR's mechanistic appendix (granularity, relations across depth, interaction structure,
attention density) from one harm run per boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.sensor.limits import DEFAULT_MAX_TOKENS
from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.cli.common import (
    LAYERS_0_BASED,
    AddressOpt,
    AllowControlOpt,
    BoundaryTokensOpt,
    DeviceOpt,
    DtypeOpt,
    ExecutorOpt,
    GpusOpt,
    MemoryOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    WorkersOpt,
    app,
    at_least,
    console,
    executor_for,
    load_sensor,
    model_options,
    option,
    shard_option,
    split_list,
)


@app.command()
def drsr(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for drsr.json (and per-boundary parts).")],
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of task_id@b (default: middle boundary of each).")] = None,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    max_k: Annotated[int, typer.Option("--max-k", help="Largest set cardinality (the reference measured 4).")] = 3,
    budget: Annotated[int, typer.Option(help="Sampled sets per cardinality >= 2.")] = 10,
    seed: int = 0,
    units: Annotated[str, typer.Option(help="Comma list of deletion unit kinds (default: all: reasoning, observation, "
                                            "tool_exchange, step; granularity needs step and a block kind).")
                     ] = "reasoning,observation,tool_exchange,step",
    margin: Annotated[Optional[float], typer.Option(help="Pair-ordering margin in nats/token (default 0.020).")] = None,
    unsafe: Annotated[Optional[float], typer.Option(help="Unsafe-harm threshold in nats/token (default 0.020).")] = None,
    layer: Annotated[Optional[int], typer.Option("--layer", help="Layer of the margin curve and of semantic overlap "
                                                 "(default: the middle layer). " + LAYERS_0_BASED)] = None,
    proj_dim: Annotated[Optional[int], typer.Option("--proj-dim", help="Stored representation size (seeded Gaussian "
                                                    "projection; 0: none; default 64).")] = None,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples for the CIs.")] = 1000,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None, num_gpus: GpusOpt = 0,
    memory_gb: MemoryOpt = None,
    max_tokens: BoundaryTokensOpt = DEFAULT_MAX_TOKENS,
) -> None:
    """DRSR's mechanistic appendix: step vs block harm, relations across depth, interaction structure, attention."""
    from interp.data.deletions import parse_unit_kinds
    from patching.harm import check_boundaries

    check_output_dir(out, "--out")
    with option("--units"):
        kinds = parse_unit_kinds(units)
    at_least("--max-k", max_k, 1)
    at_least("--budget", budget, 0)
    at_least("--margin", margin, 0)
    at_least("--unsafe", unsafe, 0)
    at_least("--layer", layer, 0)
    at_least("--proj-dim", proj_dim, 0)
    at_least("--n-boot", n_boot, 1)
    dtype = model_options(device, dtype, "drsr")
    runner, load = executor_for(executor, address, workers, num_gpus, memory_gb, model, model_path, device, dtype)
    chosen_shard = shard_option(shard)
    at_least("--max-tokens", max_tokens, 1)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    keys = split_list(boundaries) if boundaries else None
    if keys is not None:
        with option("--boundaries"):
            keys = check_boundaries(keys, trajs)
    sensor = load_sensor(model, model_path, device, dtype)
    with option("--layer"):
        if layer is not None and layer >= sensor.n_layers:
            raise ValueError(f"{layer}: the model has layers 0..{sensor.n_layers - 1}")
    result = stages.drsr(sensor, trajs, out, keys, max_k, budget, seed, kinds, margin, unsafe, layer, proj_dim,
                         chosen_shard, runner, load, max_tokens, n_boot)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} boundaries", markup=False)
        return
    g = result["granularity"]
    console.print(f"{out / 'drsr.json'}: {len(result['boundaries'])} boundaries, {result['relations']['n_sets']} sets "
                  f"of 2+ units; median step-harm range {g['step_range']['median']}, block-harm range "
                  f"{g['block_range']['median']}; {len(result['skipped'])} skipped (over {max_tokens} tokens)",
                  markup=False)
