"""Causal commands: ``patch`` (KL Repair) and ``harm`` (DRSR set-level deletion harm)."""

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
    GateScorerOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    app,
    build,
    check_gate_scorer,
    checked,
    console,
    executor_for,
    executor_options,
    load_sensor,
    model_options,
    shard_option,
)
from patching.config import HarmConfig, PatchConfig


@app.command()
@executor_options
def patch(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for kl_repair.json (and per-trajectory parts).")],
    condition: Annotated[str, typer.Option(help="Deletion condition giving P_del.")] = PatchConfig.condition,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    layers: Annotated[str, typer.Option(help="all | full_attention | 0,4,8 | 0-7 | 1based:4,8,32 (resid_pre; 'all' adds "
                                             "the final resid_post). " + LAYERS_0_BASED)] = PatchConfig.layers,
    site: Annotated[str, typer.Option(help="resid_pre, attn_out or mlp_out.")] = PatchConfig.site,
    positions: Annotated[int, typer.Option("--positions", help="Patch the last n positions (1 = boundary token).")
                         ] = PatchConfig.positions,
    method: Annotated[str, typer.Option(help="fast (shared prefix, batched sites, sdpa) or reference (TransformerLens "
                                             "bridge run_with_hooks, one whole forward per site).")
                      ] = PatchConfig.method,
    task_ids: Annotated[Optional[str], typer.Option("--task-ids", help="Comma list of trajectories (default: all).")
                        ] = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    max_tokens: BoundaryTokensOpt = PatchConfig.max_tokens,
    gate_scorer: GateScorerOpt = None,
    *,
    executor: ExecutorSettings,
) -> None:
    """KL Repair per layer: patch the full run's boundary activation into the deleted run."""
    from interp.extraction.batch import layer_numbers
    from patching.kl_repair import NOISE_FACTOR

    check_output_dir(out, "--out")
    config = build(PatchConfig, condition=condition, site=site, layers=layers, method=method, positions=positions,
                   task_ids=task_ids, max_tokens=max_tokens)
    layer_numbers(layers, "--layers")  # the syntax, before the model loads
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
    console.print(f"{out / 'kl_repair.json'}: {result['n_samples']} samples, {result['n_excluded']} excluded "
                  f"(d not above {NOISE_FACTOR:g}x its measured noise in {result['model'].get('dtype')}: median "
                  f"{_nats(result.get('noise_median'))}, null patch {_nats(result.get('noise_null_median'))}, "
                  f"rescheduled P_full {_nats(result.get('noise_schedule_median'))}), "
                  f"{len(result['skipped'])} skipped (over {max_tokens} tokens)")


def _nats(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} nats"


@app.command()
@executor_options
def harm(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for harm.json.")],
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of task_id@b (default: middle boundary of each).")] = None,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    max_k: Annotated[int, typer.Option("--max-k", help="Largest set cardinality (DRSR's).")] = HarmConfig.max_k,
    budget: Annotated[int, typer.Option(help="Sampled sets per cardinality >= 2.")] = HarmConfig.budget,
    seed: Annotated[int, typer.Option(help="Seed of the sampled sets.")] = HarmConfig.seed,
    units: Annotated[str, typer.Option(help="Comma list of deletion unit kinds, any mix of reasoning, observation, "
                                            "tool_exchange (a call with its result), step (default: DRSR's; "
                                            "reasoning alone is the cheaper setting).")
                     ] = ",".join(HarmConfig.units),
    margin: Annotated[float, typer.Option(help="Pair-ordering margin in nats/token.")] = HarmConfig.margin,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    max_tokens: BoundaryTokensOpt = HarmConfig.max_tokens,
    *,
    executor: ExecutorSettings,
) -> None:
    """Set-level deletion harm (DRSR): exact vs additive harm of deleting history units jointly."""
    check_output_dir(out, "--out")
    config = build(HarmConfig, boundaries=boundaries, max_k=max_k, budget=budget, seed=seed, units=units,
                   margin=margin, max_tokens=max_tokens)  # before the model loads
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
                  f"{len(result['skipped'])} skipped (over {max_tokens} tokens)")
