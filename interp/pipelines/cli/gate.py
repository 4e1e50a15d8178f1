"""``interp gate train`` / ``interp gate eval``: DRSR's learned set-risk gate from an ``interp drsr`` run's parts
(no model forward); the gate itself runs as the ``drsr_gate`` history condition (``--gate-scorer``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from interp.io import check_output_dir
from interp.pipelines import stages
from interp.pipelines.cli.common import app, config_options, console
from patching.config import GateConfig

OPTIONS = {"n_members": "--members"}  # config field -> option, where the option's name is not the field's

gate_app = typer.Typer(help="DRSR's set-risk gate: train a set-harm scorer on DRSR parts, evaluate it held out.",
                       no_args_is_help=True)
app.add_typer(gate_app, name="gate")

DrsrOpt = Annotated[Path, typer.Option("--drsr", help="Output folder of `interp drsr` (drsr.json and parts/).")]
PartsOpt = Annotated[Optional[Path], typer.Option("--parts", help="The parts/drsr.* folder to read (default: the "
                                                                  "one holding drsr.json's boundaries).")]


@gate_app.command("train")
@config_options(GateConfig, OPTIONS, skip=("n_boot",))
def gate_train(
    drsr: DrsrOpt,
    out: Annotated[Path, typer.Option("--out", help="Folder for gate_scorer.json.")],
    parts: PartsOpt = None,
    *,
    config: GateConfig,
) -> None:
    """Fit the set-harm scorer on the train trajectories and select K, beta, tau on validation."""
    check_output_dir(out, "--out")
    info = stages.gate_train(drsr, out, config, parts)
    s = info["setting"]
    console.print(f"{info['scorer']}: {info['n_rows']} sets; split {len(info['split']['train'])}/"
                  f"{len(info['split']['validation'])}/{len(info['split']['test'])} trajectories; selected K {s['k']}, "
                  f"beta {s['beta']}, tau {s['tau']}; {info['train_seconds']:.1f} s", markup=False)


@gate_app.command("eval")
@config_options(GateConfig, skip=("scorer", "seed", "n_members", "unsafe"))  # the scorer file holds those
def gate_eval(
    drsr: DrsrOpt,
    scorer: Annotated[Path, typer.Option("--scorer", help="gate_scorer.json of `interp gate train`.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for gate.json.")],
    parts: PartsOpt = None,
    *,
    config: GateConfig,
) -> None:
    """Evaluate a scorer file's gate on its held-out test trajectories (gate.json)."""
    check_output_dir(out, "--out")
    doc = stages.gate_eval(drsr, scorer, out, config, parts)
    g, p = doc["gate"], doc["prediction"]
    console.print(f"{Path(out) / 'gate.json'}: test MAE {p['mae']}, Spearman {p['spearman']}; gate coverage "
                  f"{g['coverage']}, removal {g['removal']}, unsafe rate {g['unsafe_rate']}", markup=False)
