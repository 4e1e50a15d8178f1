"""Causal commands: ``patch`` (KL Repair) and ``harm`` (DRSR set-level deletion harm)."""

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
    GateScorerOpt,
    ExecutorOpt,
    GpusOpt,
    MemoryOpt,
    ModelOpt,
    ModelPathOpt,
    ShardOpt,
    TrajectoriesOpt,
    WorkersOpt,
    app,
    build,
    check_gate_scorer,
    console,
    executor_for,
    load_sensor,
    model_options,
    option,
    shard_option,
    split_list,
)


@app.command()
def patch(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for kl_repair.json (and per-trajectory parts).")],
    condition: Annotated[str, typer.Option(help="Deletion condition giving P_del.")] = "delete_all_reasoning",
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    layers: Annotated[str, typer.Option(help="all | full_attention | 0,4,8 | 0-7 | 1based:4,8,32 (resid_pre; 'all' adds "
                                             "the final resid_post). " + LAYERS_0_BASED)] = "all",
    site: Annotated[str, typer.Option(help="resid_pre, attn_out or mlp_out.")] = "resid_pre",
    positions: Annotated[int, typer.Option("--positions", help="Patch the last n positions (1 = boundary token).")] = 1,
    method: Annotated[str, typer.Option(help="fast (shared prefix, batched sites, sdpa) or reference (TransformerLens bridge run_with_hooks, one whole forward per site).")] = "fast",
    task_ids: Annotated[Optional[str], typer.Option("--task-ids", help="Comma list of trajectories (default: all).")] = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None, num_gpus: GpusOpt = 0,
    memory_gb: MemoryOpt = None,
    max_tokens: BoundaryTokensOpt = DEFAULT_MAX_TOKENS,
    gate_scorer: GateScorerOpt = None,
) -> None:
    """KL Repair per layer: patch the full run's boundary activation into the deleted run."""
    from interp.extraction.batch import layer_numbers, parse_layers
    from patching.config import PatchConfig
    from patching.kl_repair import NOISE_FACTOR, default_sites

    check_output_dir(out, "--out")
    config = build(PatchConfig, condition=condition, site=site, method=method, positions=positions,
                   max_tokens=max_tokens)
    layer_numbers(layers, "--layers")
    check_gate_scorer([config.condition], gate_scorer)
    dtype = model_options(device, dtype, "kl_repair")
    runner, load = executor_for(executor, address, workers, num_gpus, memory_gb, model, model_path, device, dtype)
    chosen_shard = shard_option(shard)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    unknown = [t for t in split_list(task_ids or "") if t not in {x.task_id for x in trajs}]
    if unknown:
        raise ValueError(f"--task-ids: {', '.join(unknown)} not in the trajectory file {trajectories}")
    sensor = load_sensor(model, model_path, device, dtype)
    chosen = parse_layers(layers, sensor.n_layers, sensor.full_attention_layers, "--layers")
    sites = default_sites(sensor.n_layers, config.site, layers=chosen)
    result = stages.patch(sensor, trajs, out, config.condition, sites, config.method, config.positions,
                          split_list(task_ids) if task_ids else None, chosen_shard, runner, load, config.max_tokens,
                          gate_scorer)
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
def harm(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for harm.json.")],
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of task_id@b (default: middle boundary of each).")] = None,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    max_k: Annotated[Optional[int], typer.Option("--max-k", help="Largest set cardinality (default 4, as DRSR "
                                                                   "reports).")] = None,
    budget: Annotated[Optional[int], typer.Option(help="Sampled sets per cardinality >= 2 (default 10).")] = None,
    seed: int = 0,
    units: Annotated[Optional[str], typer.Option(help="Comma list of deletion unit kinds, any mix of reasoning, "
                                                      "observation, tool_exchange (a call with its result), step "
                                                      "(default: DRSR's reasoning,observation,tool_exchange; "
                                                      "reasoning alone is the cheaper setting).")] = None,
    margin: Annotated[Optional[float], typer.Option(help="Pair-ordering margin in nats/token (default 0.020).")] = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
    executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None, num_gpus: GpusOpt = 0,
    memory_gb: MemoryOpt = None,
    max_tokens: BoundaryTokensOpt = DEFAULT_MAX_TOKENS,
) -> None:
    """Set-level deletion harm (DRSR): exact vs additive harm of deleting history units jointly."""
    from patching.config import HarmConfig
    from patching.harm import check_boundaries

    check_output_dir(out, "--out")
    given = {k: v for k, v in (("max_k", max_k), ("budget", budget), ("units", units)) if v is not None}
    config = build(HarmConfig, seed=seed, margin=margin, max_tokens=max_tokens, **given)  # before the model loads
    dtype = model_options(device, dtype, "harm")
    runner, load = executor_for(executor, address, workers, num_gpus, memory_gb, model, model_path, device, dtype)
    chosen_shard = shard_option(shard)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    keys = split_list(boundaries) if boundaries else None
    if keys is not None:
        with option("--boundaries"):
            keys = check_boundaries(keys, trajs)
    result = stages.harm(load_sensor(model, model_path, device, dtype), trajs, out, keys, config.max_k,
                         config.budget, config.seed, config.units, config.margin, chosen_shard, runner, load,
                         config.max_tokens)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} boundaries", markup=False)
        return
    console.print(f"{out / 'harm.json'}: {len(result['boundaries'])} boundaries; units {', '.join(result['units'])}; "
                  f"{len(result['skipped'])} skipped (over {max_tokens} tokens)")
