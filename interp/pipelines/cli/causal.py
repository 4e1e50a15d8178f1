"""Causal commands: ``patch`` (KL Repair) and ``harm`` (DRSR set-level deletion harm)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    checked,
    config_options,
    console,
    executor_for,
    executor_options,
    load_sensor,
    model_options,
    shard_option,
)
from interp.schema import as_number, as_object
from patching.config import HarmConfig, PatchConfig


@app.command()
@executor_options
@config_options(PatchConfig)
def patch(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for kl_repair.json (and per-trajectory parts), or "
                                      "attribution.json and its maps with --method attribution.")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    gate_scorer: GateScorerOpt = None,
    *,
    executor: ExecutorSettings,
    config: PatchConfig,
) -> None:
    """KL Repair per layer: patch the full run's boundary activation into the deleted run."""
    from interp.extraction.batch import layer_numbers
    check_output_dir(out, "--out")
    layer_numbers(config.layers, "--layers")  # the syntax, before the model loads
    check_gate_scorer([config.condition], gate_scorer)
    dtype = model_options(device, dtype, PatchConfig)
    runner, load = executor_for(executor, model, model_path, device, dtype)
    chosen_shard = shard_option(shard)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    checked(config.check_task_ids, trajs)  # before the model loads
    sensor = load_sensor(model, model_path, device, dtype)
    result = checked(stages.patch, sensor, trajs, out, config, shard=chosen_shard, executor=runner, load=load,
                     gate_scorer=gate_scorer)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} trajectories", markup=False)
        return
    if "agreement" in result:  # attribution.json (config.method "attribution")
        agree = {part: as_object(result["agreement"][part]) for part in ("tail", "history", "harm")}
        console.print(f"{out / 'attribution.json'}: {len(result['boundaries'])} boundaries, "
                      f"{len(result['skipped'])} skipped; first order vs exact: "
                      + "; ".join(f"{part} Spearman {_num(as_number(a['spearman']))}, MAE {_num(as_number(a['mae']))} "
                                  f"over {a['n']}" for part, a in agree.items()), markup=False)
        return
    console.print(f"{out / 'kl_repair.json'}: {result['n_samples']} samples, {result['n_excluded']} excluded "
                  f"(d not above {result['noise_factor']:g}x its measured noise in {result['model'].get('dtype')}: median "
                  f"{_nats(result['noise_median'])}, null patch {_nats(result['noise_null_median'])}, "
                  f"rescheduled P_full {_nats(result['noise_schedule_median'])}), "
                  f"{len(result['skipped'])} skipped (over {config.max_tokens} tokens)")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _nats(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} nats"


@app.command()
@executor_options
@config_options(HarmConfig)
def harm(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for harm.json.")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    *,
    executor: ExecutorSettings,
    config: HarmConfig,
) -> None:
    """Set-level deletion harm (DRSR): exact vs additive harm of deleting history units jointly."""
    check_output_dir(out, "--out")
    dtype = model_options(device, dtype, HarmConfig)
    runner, load = executor_for(executor, model, model_path, device, dtype)
    chosen_shard = shard_option(shard)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    checked(config.boundary_keys, trajs)
    result = checked(stages.harm, load_sensor(model, model_path, device, dtype), trajs, out, config,
                     shard=chosen_shard, executor=runner, load=load)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} boundaries", markup=False)
        return
    console.print(f"{out / 'harm.json'}: {len(result['boundaries'])} boundaries; units {', '.join(result['units'])}; "
                  f"{len(result['skipped'])} skipped (over {config.max_tokens} tokens)")
