"""A new analysis needs only the files the "Adding an analysis" table of docs/contributing.md lists.

A throw-away analysis (``toy``: the mean number of steps of the trajectories, scaled) is added the documented
way, each part standing in for one row of the table, and nothing else is edited:

- its computation, writer, ``FIELDS`` and config (``interp/<layer>/<analysis>.py``): :func:`toy_stage`'s work,
  :data:`TOY_FIELDS`, :class:`ToyConfig`;
- its figure, table and report section (``interp/reporting/figures/<analysis>.py``): the builders below;
- one ``Analysis(...)`` record (``interp/reporting/analyses.py``), patched into the registry;
- its stage and one ``Step(...)`` (``interp/pipelines/stages.py``), passed to the demo as its steps;
- its config in ``CONFIGS`` (``interp/pipelines/configs.py``), patched in.

The demo then runs it (stub sensor, no weights), records its settings, writes its figure and table and puts its
section in report.md; a second run reuses it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import ClassVar

import pytest
from rich.console import Console

from interp.io import atomic_write_json
from interp.pipelines import configs, demo, stages
from interp.pipelines.steps import Step, StepContext
from interp.record import RECORD_FIELDS, config_from, record
from interp.reporting import analyses, report, tables
from interp.reporting import figures as figures_module
from interp.reporting.ran import setting
from interp.schema import Field

pytestmark = pytest.mark.e2e

TOY_FIELDS = (Field("mean_steps", "[]", "float", "steps", "mean steps per trajectory, times scale"),
              Field("n_trajectories", "[]", "int", "trajectories", "trajectories read"), *RECORD_FIELDS)


@dataclass(frozen=True)
class ToyConfig:
    """The toy analysis's settings."""

    analysis: ClassVar[str] = "toy"
    precision: ClassVar[str | None] = None

    scale: float = 2.0

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale: must be > 0, got {self.scale!r}")


def toy_stage(trajs: list, out: Path, config: ToyConfig) -> dict:
    doc = {"mean_steps": config.scale * sum(t.n_steps for t in trajs) / len(trajs), "n_trajectories": len(trajs),
           **record(config)}
    atomic_write_json(out / "toy.json", doc)
    return doc


def toy_figure(doc):
    import plotly.graph_objects as go

    return go.Figure(go.Bar(y=[doc["mean_steps"]]))


def toy_table(doc):
    import pandas as pd

    return pd.DataFrame([("mean steps", f"{doc['mean_steps']:.2f}")], columns=["quantity", "ours"])


def toy_section(doc, folder):
    return [f"mean steps x {setting(doc, 'scale')} = {doc['mean_steps']:.2f} over {doc['n_trajectories']} "
            "trajectories"]


TOY = analyses.Analysis("toy", "Toy analysis", "toy", "toy.json",
                        files=(analyses.ResultFile("toy.json", f"{__name__}:TOY_FIELDS"),),
                        figures=(analyses.Figure("fig99_toy", "toy.json", f"{__name__}:toy_figure"),),
                        tables=(analyses.Table("toy", "toy.json", f"{__name__}:toy_table", "Toy numbers."),),
                        section=f"{__name__}:toy_section")


def _toy_settings(ctx: StepContext) -> dict:
    return asdict(ToyConfig(scale=3.0))


TOY_STEP = Step("toy", "toy analysis", TOY.path(),
                lambda ctx, s: toy_stage(ctx.trajs, ctx.out / TOY.folder, ToyConfig(**s)), _toy_settings, model=False)


@pytest.fixture()
def registered(monkeypatch):
    """The toy analysis in the registry (and what reads it at import), its config in CONFIGS; a stub sensor."""
    registry = (*analyses.ANALYSES, TOY)
    for module in (analyses, tables, report):
        monkeypatch.setattr(module, "ANALYSES", registry)
    monkeypatch.setattr(figures_module, "FIGURES", (*figures_module.FIGURES, figures_module.FigureSpec(
        "fig99_toy", TOY.path(), toy_figure)))
    monkeypatch.setattr(configs, "CONFIGS", MappingProxyType({**configs.CONFIGS, "toy": ToyConfig}))
    monkeypatch.setattr(stages, "sensor", lambda spec, *a, **k: SimpleNamespace(
        spec=spec, revision="rev", dtype="torch.float32", device="cpu", kernels=None))
    monkeypatch.setattr("interp.sensor.kernels.binding.kernels_line", lambda kernels: "stub")


def test_a_new_analysis_runs_through_the_demo_figures_and_report(registered, tmp_path):
    console = Console(record=True, width=300)
    path = demo.run_demo(demo.DemoConfig(out=tmp_path, model="stub", png=False), console, steps=(TOY_STEP,))
    doc = json.loads((tmp_path / "toy" / "toy.json").read_text())
    trajs = stages.demo_trajectories(stages.trajectories(demo.DEMO_TRAJECTORIES), demo.DemoConfig.per_domain)
    assert {k: doc[k] for k in ("mean_steps", "n_trajectories")} == {
        "mean_steps": pytest.approx(3.0 * sum(t.n_steps for t in trajs) / len(trajs)), "n_trajectories": len(trajs)}
    assert config_from(ToyConfig, doc["config"]) == ToyConfig(scale=3.0)  # the record is what ran
    assert json.loads((tmp_path / "toy" / "toy.inputs.json").read_text())["settings"] == {"scale": 3.0}
    assert (tmp_path / "figures" / "fig99_toy.html").is_file()
    assert f"| mean steps | {doc['mean_steps']:.2f} |" in (tmp_path / "tables" / "toy.md").read_text()
    text = path.read_text()
    assert "## Toy analysis" in text and f"mean steps x 3.0 = {doc['mean_steps']:.2f} over {len(trajs)} trajectories" in text
    again = Console(record=True, width=300)
    demo.run_demo(demo.DemoConfig(out=tmp_path, model="stub", png=False), again, steps=(TOY_STEP,))
    assert "toy analysis: reusing" in again.export_text()
